"""``confluent_kafka.admin`` over :class:`kwire.admin.Admin`: AdminClient whose calls return
``concurrent.futures.Future`` objects, as confluent-kafka's do, for every operation kwire's Admin
has -- ``create_topics``, ``list_topics`` (returns the metadata directly, as confluent-kafka
does) and ``delete_records``.  Each call runs on one worker thread owned by the AdminClient, so
calls are served in order and the caller never blocks.

Operations kwire's Admin does not have (delete_topics, create_partitions, describe_configs,
alter_configs, ACLs, consumer-group calls, ...) raise KafkaException(_NOT_IMPLEMENTED) at once.
"""
from __future__ import annotations

import concurrent.futures
from typing import Any

from ..admin import Admin as _KAdmin
from ..admin import NewTopic as _KNewTopic
from ..errors import ConfigError
from ._config import config_error, split_config
from ._types import KafkaError, KafkaException, TopicPartition, to_kafka_error

__all__ = ["AdminClient", "NewTopic", "ClusterMetadata", "BrokerMetadata", "TopicMetadata",
           "PartitionMetadata", "DeletedRecords"]


class NewTopic:
    """A topic to create: ``NewTopic(topic, num_partitions=-1, replication_factor=-1,
    replica_assignment=None, config=None)`` (-1: the broker's default)."""

    def __init__(self, topic, num_partitions=-1, replication_factor=-1, replica_assignment=None,
                 config=None):
        if not isinstance(topic, str):
            raise TypeError("topic must be a str")
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignment = list(replica_assignment or [])
        self.config = dict(config or {})

    def __repr__(self):
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"

    def __eq__(self, other):
        return isinstance(other, NewTopic) and (self.topic, self.num_partitions) == (other.topic, other.num_partitions)

    def __hash__(self):
        return hash((self.topic, self.num_partitions))


class BrokerMetadata:
    def __init__(self):
        self.id = -1
        self.host = None
        self.port = -1

    def __repr__(self):
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self):
        return f"{self.host}:{self.port}/{self.id}"


class PartitionMetadata:
    def __init__(self):
        self.id = -1
        self.leader = -1
        self.replicas = []
        self.isrs = []
        self.error = None

    def __repr__(self):
        return f"PartitionMetadata({self.id})"


class TopicMetadata:
    def __init__(self):
        self.topic = None
        self.partitions = {}
        self.error = None

    def __repr__(self):
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self):
        return self.topic


class ClusterMetadata:
    def __init__(self):
        self.cluster_id = None
        self.controller_id = -1
        self.brokers = {}
        self.topics = {}
        self.orig_broker_id = -1
        self.orig_broker_name = None

    def __repr__(self):
        return f"ClusterMetadata({self.cluster_id})"


class DeletedRecords:
    """The outcome of delete_records() for one partition."""

    def __init__(self, low_watermark):
        self.low_watermark = low_watermark

    def __repr__(self):
        return f"DeletedRecords(low_watermark={self.low_watermark})"


def _cluster_metadata(snap) -> ClusterMetadata:
    """confluent-kafka's ClusterMetadata from a kwire ClusterSnapshot."""
    cm = ClusterMetadata()
    cm.cluster_id = snap.cluster_id
    cm.controller_id = snap.controller_id
    for bid, b in snap.brokers.items():
        bm = BrokerMetadata()
        bm.id, bm.host, bm.port = bid, b.host, b.port
        cm.brokers[bid] = bm
    for name, t in snap.topics.items():
        tm = TopicMetadata()
        tm.topic = name
        tm.error = KafkaError(t.error_code) if t.error_code else None
        for pid, p in t.partitions.items():
            pm = PartitionMetadata()
            pm.id, pm.leader = pid, p.leader
            pm.replicas, pm.isrs = list(p.replicas), list(p.isr)
            pm.error = KafkaError(p.error_code) if p.error_code else None
            tm.partitions[pid] = pm
        cm.topics[name] = tm
    return cm


def _timeout(t):
    return None if t is None or t < 0 else float(t)


class AdminClient:
    """confluent-kafka's AdminClient(conf) over kwire's Admin."""

    def __init__(self, conf: dict | None = None, **kwargs: Any):
        kconf, extra = split_config(conf, kwargs, "admin")
        kconf.pop("logger", None)
        for k in ("group.id", "enable.auto.commit"):
            kconf.pop(k, None)
        try:
            self._a = _KAdmin(kconf)
        except ConfigError as exc:
            raise config_error(exc) from None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kwire-admin")

    def _request_timeout(self, request_timeout, operation_timeout) -> float:
        """librdkafka's rule: request_timeout, by default socket.timeout.ms; at least the
        operation_timeout the brokers are given."""
        t = _timeout(request_timeout)
        if t is None:
            t = self._a.config.socket_timeout_ms / 1000
        return max(t, float(operation_timeout or 0))

    def _submit(self, fn, *args) -> concurrent.futures.Future:
        return self._pool.submit(fn, *args)

    def create_topics(self, new_topics, operation_timeout=0, request_timeout=-1, validate_only=False):
        """``{topic: Future}``; each future's result is None, or it raises KafkaException."""
        if not isinstance(new_topics, list) or not new_topics:
            raise ValueError("Expected non-empty list of NewTopic objects")
        for t in new_topics:
            if not isinstance(t, NewTopic):
                raise TypeError("Expected list of NewTopic objects")
        if len({t.topic for t in new_topics}) != len(new_topics):
            raise ValueError("Duplicate topics not allowed")
        for t in new_topics:
            if t.replica_assignment:
                raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                                "replica_assignment is not supported by kwire"))
        futs = {t.topic: concurrent.futures.Future() for t in new_topics}
        timeout = self._request_timeout(request_timeout, operation_timeout)

        def run():
            try:
                res = self._a.create_topics(
                    [_KNewTopic(t.topic, t.num_partitions, t.replication_factor, t.config)
                     for t in new_topics], timeout, validate_only=validate_only,
                    raise_on_error=False)
            except BaseException as exc:
                for f in futs.values():
                    f.set_exception(KafkaException(to_kafka_error(exc)))
                return
            for name, f in futs.items():
                err = res.get(name)
                if err is None:
                    f.set_result(None)
                else:
                    f.set_exception(KafkaException(to_kafka_error(err)))
        for f in futs.values():
            f.set_running_or_notify_cancel()
        self._submit(run)
        return futs

    def list_topics(self, topic=None, timeout=-1):
        """Cluster metadata (ClusterMetadata), directly, as confluent-kafka's."""
        try:
            return _cluster_metadata(self._a.list_topics(topic, _timeout(timeout)))
        except Exception as exc:
            raise KafkaException(to_kafka_error(exc)) from None

    def delete_records(self, topic_partition_offsets, request_timeout=-1, operation_timeout=0):
        """``{TopicPartition: Future}``; each result is a DeletedRecords (its new
        low_watermark).  ``offset`` OFFSET_END (-1) deletes everything up to the high
        watermark."""
        if not isinstance(topic_partition_offsets, list) or not topic_partition_offsets:
            raise ValueError("Expected non-empty list of TopicPartition")
        for tp in topic_partition_offsets:
            if not isinstance(tp, TopicPartition):
                raise TypeError("Expected list of TopicPartition")
            if tp.partition < 0:
                raise ValueError("partition must be >= 0")
        if len({(tp.topic, tp.partition) for tp in topic_partition_offsets}) != len(topic_partition_offsets):
            raise ValueError("Duplicate partitions not allowed")
        futs = {tp: concurrent.futures.Future() for tp in topic_partition_offsets}
        timeout = self._request_timeout(request_timeout, operation_timeout)

        def run():
            offsets = {(tp.topic, tp.partition): tp.offset for tp in topic_partition_offsets}
            try:
                res = self._a.delete_records(offsets, timeout)
            except BaseException as exc:
                for f in futs.values():
                    f.set_exception(KafkaException(to_kafka_error(exc)))
                return
            for tp, f in futs.items():
                f.set_result(DeletedRecords(res[(tp.topic, tp.partition)]))
        for f in futs.values():
            f.set_running_or_notify_cancel()
        self._submit(run)
        return futs

    def _unsupported(self, *args, **kwargs):
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                        "not supported by kwire's Admin"))

    delete_topics = create_partitions = describe_configs = alter_configs = _unsupported
    incremental_alter_configs = create_acls = describe_acls = delete_acls = _unsupported
    list_consumer_groups = describe_consumer_groups = delete_consumer_groups = _unsupported
    list_consumer_group_offsets = alter_consumer_group_offsets = _unsupported
    describe_topics = describe_cluster = list_offsets = elect_leaders = _unsupported
    describe_user_scram_credentials = alter_user_scram_credentials = _unsupported

    def poll(self, timeout=None):
        """Nothing to serve: callbacks complete the futures on the worker thread."""
        return 0

    def __len__(self):
        return self._pool._work_queue.qsize()

    def close(self):
        self._pool.shutdown(wait=True)
        self._a.close()
