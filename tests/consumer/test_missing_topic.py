"""A topic or partition that does not exist is named as such (issue 14, defect 9): watermark
and offsets-for-times look-ups raise UNKNOWN_TOPIC_OR_PARTITION once the cluster has said so,
instead of waiting out their timeout; assign() to it reports the error to error_cb.  On Apache
Kafka, whose Metadata answer says what exists."""
from __future__ import annotations

import time

import pytest

from kwire import TopicPartition
from kwire.consumer import Consumer
from kwire.errors import BrokerError, KafkaTimeoutError


def _unknown(exc):
    return isinstance(exc, BrokerError) and exc.name == "UNKNOWN_TOPIC_OR_PARTITION"


def test_missing_topic_and_partition_are_named(kafka, unique_topic, create_topic):
    create_topic(kafka, unique_topic, 1)
    errors: list = []
    with Consumer({"bootstrap.servers": kafka.bootstrap, "error_cb": errors.append}) as c:
        for tp in (TopicPartition(f"{unique_topic}-missing", 0), TopicPartition(unique_topic, 5)):
            with pytest.raises((BrokerError, KafkaTimeoutError)) as info:
                c.get_watermark_offsets(tp, timeout=20)
            assert _unknown(info.value), repr(info.value)
            with pytest.raises((BrokerError, KafkaTimeoutError)) as info:
                c.offsets_for_times([TopicPartition(tp.topic, tp.partition, 1_700_000_000_000)],
                                    timeout=20)
            assert _unknown(info.value), repr(info.value)
        # the topic that exists still answers
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=20) == (0, 0)
        c.assign([TopicPartition(f"{unique_topic}-missing", 0, 0)])
        end = time.monotonic() + 20
        while not errors and time.monotonic() < end:
            assert c.consume(10, timeout=0.2) == []
        assert errors and _unknown(errors[0]), errors
