"""``confluent_kafka.admin`` over :class:`kwire.admin.Admin`: AdminClient whose calls return
``concurrent.futures.Future`` objects, keyed as confluent-kafka keys them, for every operation
kwire's Admin has: ``create_topics``, ``delete_topics``, ``create_partitions`` (by topic),
``describe_configs``, ``incremental_alter_configs`` (by ConfigResource), ``list_consumer_groups``
(one future), ``describe_consumer_groups``, ``delete_consumer_groups``,
``list_consumer_group_offsets``, ``alter_consumer_group_offsets`` (by group id),
``list_offsets``, ``delete_records`` (by TopicPartition), ``describe_cluster`` (one future);
``list_topics`` returns the metadata directly, as confluent-kafka's does.  A failed item's
future raises KafkaException wrapping a KafkaError (its code the broker's, or librdkafka's local
one).  Each call runs on one worker thread owned by the AdminClient, so calls are served in
order and the caller never blocks.

``alter_configs`` (deprecated, non-incremental) too.

Not provided (KafkaException(_NOT_IMPLEMENTED) at once): ACLs,
``elect_leaders``, SCRAM credentials, ``replica_assignment`` in create_topics/create_partitions.
"""
from __future__ import annotations

import concurrent.futures
import warnings
from concurrent.futures import Future
from typing import Any

from ..admin import BrokerNode as _KBrokerNode
from ..admin import ConfigEntry as _KConfigEntry
from ..admin import NewTopic as _KNewTopic
from ..admin import TopicDescription as _KTopicDescription
from ..net import ClusterSnapshot
from ._admin_base import _timeout
from ._admin_groups import _GroupCalls
from ._admin_types import (
    WIRE_RESOURCE,
    AclOperation,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    DescribeClusterResult,
    IsolationLevel,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    Node,
    OffsetSpec,
    ResourceType,
    TopicCollection,
    TopicDescription,
    TopicPartitionInfo,
    Uuid,
)
from ._types import KafkaError, KafkaException, TopicPartition, to_kafka_error

__all__ = ["AdminClient", "NewTopic", "ClusterMetadata", "BrokerMetadata", "TopicMetadata",
           "PartitionMetadata", "DeletedRecords", "NewPartitions", "ConfigResource", "ConfigEntry",
           "ConfigSource", "AlterConfigOpType", "ResourceType", "ConsumerGroupListing",
           "ListConsumerGroupsResult", "MemberAssignment", "MemberDescription",
           "ConsumerGroupDescription", "ConsumerGroupState", "ConsumerGroupTopicPartitions",
           "ConsumerGroupType", "OffsetSpec", "ListOffsetsResultInfo",
           "DescribeClusterResult", "TopicDescription", "KafkaException", "KafkaError",
           "AclOperation", "Uuid"]


class NewTopic:
    """A topic to create: ``NewTopic(topic, num_partitions=-1, replication_factor=-1,
    replica_assignment=None, config=None)`` (-1: the broker's default)."""

    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment: list[list[int]] | None = None,
                 config: dict[str, str] | None = None) -> None:
        if not isinstance(topic, str):
            raise TypeError("topic must be a str")
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignment = list(replica_assignment or [])
        self.config = dict(config or {})

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NewTopic) and (self.topic, self.num_partitions) == (other.topic, other.num_partitions)

    def __hash__(self) -> int:
        return hash((self.topic, self.num_partitions))


class BrokerMetadata:
    def __init__(self) -> None:
        self.id = -1
        self.host: str | None = None
        self.port = -1

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


class PartitionMetadata:
    def __init__(self) -> None:
        self.id = -1
        self.leader = -1
        self.replicas: list[int] = []
        self.isrs: list[int] = []
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"PartitionMetadata({self.id})"


class TopicMetadata:
    def __init__(self) -> None:
        self.topic: str | None = None
        self.partitions: dict[int, PartitionMetadata] = {}
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self) -> str:
        return str(self.topic)


class ClusterMetadata:
    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"


class DeletedRecords:
    """The outcome of delete_records() for one partition."""

    def __init__(self, low_watermark: int) -> None:
        self.low_watermark = low_watermark

    def __repr__(self) -> str:
        return f"DeletedRecords(low_watermark={self.low_watermark})"


def _cluster_metadata(snap: ClusterSnapshot) -> ClusterMetadata:
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


class AdminClient(_GroupCalls):
    """confluent-kafka's AdminClient(conf) over kwire's Admin."""

    def create_topics(self, new_topics: list[NewTopic], operation_timeout: float = 0,
                      request_timeout: float | None = -1,
                      validate_only: bool = False) -> dict[str, Future[None]]:
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
        futs: dict[str, Future[None]] = {t.topic: concurrent.futures.Future() for t in new_topics}
        timeout = self._request_timeout(request_timeout, operation_timeout)

        return self._dispatch(futs, lambda: self._a.create_topics(
            [_KNewTopic(t.topic, t.num_partitions, t.replication_factor, t.config)
             for t in new_topics], timeout, validate_only=validate_only, raise_on_error=False))

    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> ClusterMetadata:
        """Cluster metadata (ClusterMetadata), directly, as confluent-kafka's."""
        try:
            return _cluster_metadata(self._a.list_topics(topic, _timeout(timeout)))
        except Exception as exc:
            raise KafkaException(to_kafka_error(exc)) from None

    def delete_records(self, topic_partition_offsets: list[TopicPartition],
                       request_timeout: float | None = -1,
                       operation_timeout: float = 0) -> dict[TopicPartition, Future[DeletedRecords]]:
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
        futs: dict[TopicPartition, Future[DeletedRecords]] = {
            tp: concurrent.futures.Future() for tp in topic_partition_offsets}
        timeout = self._request_timeout(request_timeout, operation_timeout)

        def run() -> None:
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

    # --- the rest of kwire's Admin, as confluent-kafka's futures ---------------------------------
    def delete_topics(self, topics: list[str], operation_timeout: float = 0,
                      request_timeout: float | None = -1) -> dict[str, Future[Any]]:
        """``{topic: Future}``; each result is None."""
        if not isinstance(topics, list) or not topics:
            raise ValueError("Expected non-empty list of topic strings")
        for t in topics:
            if not isinstance(t, str):
                raise TypeError("Expected list of topic strings")
        timeout = self._request_timeout(request_timeout, operation_timeout)
        futs: dict[str, Future[Any]] = {t: concurrent.futures.Future() for t in topics}
        return self._dispatch(futs, lambda: self._a.delete_topics(topics, timeout, raise_on_error=False))

    def create_partitions(self, new_partitions: list[NewPartitions], operation_timeout: float = 0,
                          request_timeout: float | None = -1,
                          validate_only: bool = False) -> dict[str, Future[Any]]:
        """``{topic: Future}``; each result is None."""
        if not isinstance(new_partitions, list) or not new_partitions:
            raise ValueError("Expected non-empty list of NewPartitions objects")
        for n in new_partitions:
            if not isinstance(n, NewPartitions):
                raise TypeError("Expected list of NewPartitions objects")
            if n.replica_assignment:
                raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                                "replica_assignment is not supported by kwire"))
        timeout = self._request_timeout(request_timeout, operation_timeout)
        futs: dict[str, Future[Any]] = {n.topic: concurrent.futures.Future() for n in new_partitions}
        totals = {n.topic: n.new_total_count for n in new_partitions}
        return self._dispatch(futs, lambda: self._a.create_partitions(
            totals, timeout, validate_only=validate_only, raise_on_error=False))

    @staticmethod
    def _resources(resources: object) -> dict[ConfigResource, tuple[int, str]]:
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        out: dict[ConfigResource, tuple[int, str]] = {}
        for r in resources:
            if not isinstance(r, ConfigResource):
                raise ValueError("Expected list of ConfigResource objects")  # (sic, confluent-kafka's)
            if r.restype not in WIRE_RESOURCE:
                raise ValueError(f"Unsupported resource type {r.restype}")
            out[r] = (WIRE_RESOURCE[r.restype], r.name)
        return out

    def describe_configs(self, resources: list[ConfigResource],
                         request_timeout: float | None = -1) -> dict[ConfigResource, Future[Any]]:
        """``{ConfigResource: Future}``; each result is ``{name: ConfigEntry}``."""
        wire = self._resources(resources)
        timeout = self._request_timeout(request_timeout, 0)

        def entry(c: _KConfigEntry) -> ConfigEntry:
            # (``source`` is the broker's number, an int, as confluent-kafka gives it; of
            # synonyms with the same name the last one stays, as in confluent-kafka)
            syn = {s.name: ConfigEntry(s.name, s.value, s.source, is_synonym=True)
                   for s in c.synonyms}
            return ConfigEntry(c.name, c.value, c.source, c.read_only, c.is_default,
                               c.is_sensitive, synonyms=syn)

        def work() -> dict[ConfigResource, Any]:
            res = self._a.describe_configs(list(wire.values()), timeout, include_synonyms=True,
                                           raise_on_error=False)
            out: dict[ConfigResource, Any] = {}
            for r, w in wire.items():
                got = res[w]
                out[r] = got if isinstance(got, BaseException) else {n: entry(c) for n, c in got.items()}
            return out
        return self._dispatch({r: concurrent.futures.Future() for r in wire}, work)

    def incremental_alter_configs(self, resources: list[ConfigResource], request_timeout: float | None = -1,
                                  validate_only: bool = False) -> dict[ConfigResource, Future[Any]]:
        """``{ConfigResource: Future}``; each result is None.  Each resource's
        ``incremental_configs`` are ConfigEntry objects with an ``incremental_operation``."""
        wire = self._resources(resources)
        changes: dict[tuple[int, str], list[tuple[str, int, str | None]]] = {}
        for r, w in wire.items():
            ops = []
            for e in r.incremental_configs:
                if not isinstance(e, ConfigEntry) or not isinstance(e.incremental_operation, AlterConfigOpType):
                    raise TypeError("incremental_configs must be ConfigEntry objects with an "
                                    "incremental_operation (AlterConfigOpType)")
                ops.append((e.name, e.incremental_operation.value, e.value))
            changes[w] = ops
        timeout = self._request_timeout(request_timeout, 0)

        def work() -> dict[ConfigResource, Any]:
            res = self._a.incremental_alter_configs(changes, timeout, validate_only=validate_only,
                                                    raise_on_error=False)
            return {r: res[w] for r, w in wire.items()}
        return self._dispatch({r: concurrent.futures.Future() for r in wire}, work)

    def alter_configs(self, resources: list[ConfigResource], request_timeout: float | None = -1,
                      validate_only: bool = False) -> dict[ConfigResource, Future[Any]]:
        """Deprecated by confluent-kafka (use incremental_alter_configs): replace each resource's
        whole configuration with its ``set_config_dict``.  ``{ConfigResource: Future}``; each
        result is None."""
        warnings.warn("alter_configs has been deprecated. Use incremental_alter_configs instead.",
                      DeprecationWarning, stacklevel=2)
        wire = self._resources(resources)
        configs = {w: dict(r.set_config_dict) for r, w in wire.items()}
        timeout = self._request_timeout(request_timeout, 0)

        def work() -> dict[ConfigResource, Any]:
            res = self._a.alter_configs(configs, timeout, validate_only=validate_only,
                                        raise_on_error=False)
            return {r: res[w] for r, w in wire.items()}
        return self._dispatch({r: concurrent.futures.Future() for r in wire}, work)

    def list_offsets(self, topic_partition_offsets: dict[TopicPartition, OffsetSpec],
                     request_timeout: float | None = -1,
                     isolation_level: IsolationLevel | None = None) -> dict[TopicPartition, Future[Any]]:
        """``{TopicPartition: Future}``; each result is a ListOffsetsResultInfo."""
        if not isinstance(topic_partition_offsets, dict):
            raise TypeError("Expected topic_partition_offsets to be dict of [TopicPartitions,OffsetSpec] "
                            "for list offsets request")
        for tp, spec in topic_partition_offsets.items():
            if not isinstance(tp, TopicPartition):
                raise TypeError("partition must be a TopicPartition")
            if not tp.topic:
                raise ValueError("partition topic name cannot be empty")
            if tp.partition < 0:
                raise ValueError("partition index must be non-negative")
            if not isinstance(spec, OffsetSpec):
                raise TypeError("Value must be a OffsetSpec")
        if isolation_level is not None and not isinstance(isolation_level, IsolationLevel):
            raise TypeError("isolation_level argument should be an IsolationLevel")
        iso = "read_committed" if isolation_level is IsolationLevel.READ_COMMITTED else "read_uncommitted"
        specs = {(tp.topic, tp.partition): spec._value for tp, spec in topic_partition_offsets.items()}
        timeout = self._request_timeout(request_timeout, 0)

        def work() -> dict[TopicPartition, Any]:
            res = self._a.list_offsets(specs, timeout, isolation_level=iso, raise_on_error=False)
            out: dict[TopicPartition, Any] = {}
            for tp in topic_partition_offsets:
                r = res[(tp.topic, tp.partition)]
                if isinstance(r, BaseException):
                    # as librdkafka: a partition not in the metadata is _NOENT
                    out[tp] = KafkaException(KafkaError(KafkaError._NOENT, str(r))) \
                        if getattr(r, "from_metadata", False) else r
                else:
                    out[tp] = ListOffsetsResultInfo(r.offset, r.timestamp, r.leader_epoch)
            return out
        return self._dispatch({tp: concurrent.futures.Future() for tp in topic_partition_offsets}, work)

    def describe_cluster(self, include_authorized_operations: bool = False,
                         request_timeout: float | None = -1) -> Future[Any]:
        """One Future; its result is a DescribeClusterResult."""
        timeout = self._request_timeout(request_timeout, 0)
        fut: Future[Any] = concurrent.futures.Future()

        def work() -> dict[None, DescribeClusterResult]:
            d = self._a.describe_cluster(timeout)
            nodes = [Node(b.id, b.host, b.port, b.rack) for b in d.brokers]
            controller = next((n for n in nodes if n.id == d.controller_id), None)
            return {None: DescribeClusterResult(controller, nodes, d.cluster_id)}
        self._dispatch({None: fut}, work)
        return fut

    def describe_topics(self, topics: TopicCollection, include_authorized_operations: bool = False,
                        request_timeout: float | None = -1) -> dict[str, Future[Any]]:
        """``{topic: Future}`` for a TopicCollection; each result is a TopicDescription (topic id
        as a :class:`Uuid`, partitions as TopicPartitionInfo with Nodes); a topic that does not
        exist fails its future with UNKNOWN_TOPIC_OR_PART."""
        if not isinstance(topics, TopicCollection):
            raise TypeError("Expected input to be instance of TopicCollection")
        names = topics.topic_names
        if not isinstance(names, list):
            raise TypeError("Expected list of topic names to be described")
        for n in names:
            if not isinstance(n, str):
                raise TypeError("Expected list of topic strings")
            if not n:
                raise ValueError("Empty topic name")
        timeout = self._request_timeout(request_timeout, 0)
        if len(set(names)) != len(names):  # as librdkafka: one future per name, failed
            return self._dispatch({n: concurrent.futures.Future() for n in names}, lambda: {
                n: KafkaException(KafkaError(KafkaError._INVALID_ARG, "Duplicate topics not allowed"))
                for n in names})

        def node(b: _KBrokerNode) -> Node:
            return Node(b.id, b.host, b.port, b.rack)

        def describe(d: _KTopicDescription) -> TopicDescription:
            parts = [TopicPartitionInfo(p.partition, None if p.leader is None else node(p.leader),
                                        [node(r) for r in p.replicas], [node(r) for r in p.isr])
                     for p in d.partitions]
            ops = None if d.authorized_operations is None else \
                [AclOperation(o) for o in d.authorized_operations if o in AclOperation._value2member_map_]
            return TopicDescription(d.name, Uuid.from_uuid(d.topic_id), d.is_internal, parts, ops)

        def work() -> dict[str, Any]:
            res = self._a.describe_topics(names, timeout, raise_on_error=False,
                                          include_authorized_operations=bool(include_authorized_operations))
            return {n: r if isinstance(r, BaseException) else describe(r) for n, r in res.items()}
        return self._dispatch({n: concurrent.futures.Future() for n in names}, work)

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                        "not supported by kwire's Admin"))

    create_acls = describe_acls = delete_acls = _unsupported
    elect_leaders = describe_user_scram_credentials = alter_user_scram_credentials = _unsupported

    def poll(self, timeout: float | None = None) -> int:
        """Nothing to serve: callbacks complete the futures on the worker thread."""
        return 0

    def __len__(self) -> int:
        return self._pool._work_queue.qsize()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._a.close()
