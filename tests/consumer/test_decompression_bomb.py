"""A decompression bomb does not kill the consumer (issue 14, defect 7): on Apache Kafka, a
batch written by confluent-kafka that expands past ``fetch.max.decompressed.bytes`` is raised
from consume() as DecompressionLimitError naming the partition and offset -- not an OOM, not a
silent skip -- while the same batch reads fine under the default limit."""
from __future__ import annotations

import time

import confluent_kafka
import pytest

from kwire import TopicPartition
from kwire.consumer import Consumer
from kwire.errors import DecompressionLimitError

N = 20
VALUE = b"\0" * 200_000     # 20 x 200 KB of zeros: ~4 MB that compress to a few KB


def _produce(kafka, topic, compression):
    p = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap,
                                  "compression.type": compression, "linger.ms": 500,
                                  "batch.size": 10_000_000, "message.max.bytes": 10_000_000})
    for i in range(N):
        p.produce(topic, key=b"k%d" % i, value=VALUE, partition=0)
    assert p.flush(30) == 0


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_bomb_is_a_typed_error_from_consume(kafka, unique_topic, create_topic, compression):
    create_topic(kafka, unique_topic, 1)
    _produce(kafka, unique_topic, compression)
    tp = TopicPartition(unique_topic, 0, 0)

    with Consumer({"bootstrap.servers": kafka.bootstrap,
                   "fetch.max.decompressed.bytes": 100_000}) as c:
        c.assign([tp])
        got = []
        end = time.monotonic() + 30
        with pytest.raises(DecompressionLimitError) as info:
            while time.monotonic() < end:
                got += c.consume(100, timeout=0.5)
        assert got == []            # nothing of the batch was delivered
    err = info.value
    assert (err.topic, err.partition, err.offset, err.limit) == (unique_topic, 0, 0, 100_000)
    assert compression in str(err) and "fetch.max.decompressed.bytes" in str(err)

    # the same batch under the default limit (64 MiB): every record
    with Consumer({"bootstrap.servers": kafka.bootstrap}) as c:
        c.assign([tp])
        got = []
        end = time.monotonic() + 30
        while len(got) < N and time.monotonic() < end:
            got += c.consume(100, timeout=0.5)
    assert [(m.offset, m.key, len(m.value)) for m in got] == \
        [(i, b"k%d" % i, len(VALUE)) for i in range(N)]
