"""kwire.confluent AdminClient's consumer-group calls: list, describe and delete groups, list
and alter their committed offsets (each future keyed by group id, as confluent-kafka's)."""
from __future__ import annotations

import concurrent.futures
from concurrent.futures import Future
from typing import Any

from ..admin import GroupDescription as _KGroupDescription
from ..consumer.types import OffsetAndMetadata as _KOffset
from ._admin_base import _GROUP_ID_NOT_FOUND, _AdminBase
from ._admin_types import (
    BROKER_STATE,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
    Node,
)
from ._types import OFFSET_INVALID, TopicPartition, to_kafka_error


class _GroupCalls(_AdminBase):
    """The consumer-group calls of :class:`~kwire.confluent.admin.AdminClient`."""

    def list_consumer_groups(self, request_timeout: float | None = -1,
                             states: set[ConsumerGroupState] | None = None,
                             types: set[ConsumerGroupType] | None = None) -> Future[Any]:
        """One Future; its result is a ListConsumerGroupsResult (``valid`` listings, ``errors``
        of brokers that failed)."""
        checks: tuple[tuple[str, object, type], ...] = (
            ("states", states, ConsumerGroupState), ("types", types, ConsumerGroupType))
        for what, value, cls in checks:
            if value is not None:
                if not isinstance(value, set):
                    raise TypeError(f"'{what}' must be a set")
                if not all(isinstance(v, cls) for v in value):
                    raise TypeError(f"All elements of {what} must be of type {cls.__name__}")
        st = None if not states else [BROKER_STATE[s] for s in states]
        ty = None if not types else [t.name.lower() for t in types]
        timeout = self._request_timeout(request_timeout, 0)
        fut: Future[Any] = concurrent.futures.Future()

        def work() -> dict[None, ListConsumerGroupsResult]:
            listed = self._a.list_groups(st, ty, timeout)
            return {None: ListConsumerGroupsResult(
                [ConsumerGroupListing(g.group_id, g.protocol_type == "", ConsumerGroupState.of(g.state),
                                      ConsumerGroupType.of(g.type)) for g in listed.groups],
                [to_kafka_error(e) for e in listed.errors.values()])}
        self._dispatch({None: fut}, work)
        return fut

    @staticmethod
    def _group_ids(group_ids: object) -> list[str]:
        if not isinstance(group_ids, list) or not group_ids:
            raise ValueError("Expected non-empty list of group_ids")
        out: list[str] = []
        for g in group_ids:
            if not isinstance(g, str):
                raise TypeError("Expected list of group_ids as strings")
            out.append(g)
        return out

    def describe_consumer_groups(self, group_ids: list[str], include_authorized_operations: bool = False,
                                 request_timeout: float | None = -1) -> dict[str, Future[Any]]:
        """``{group_id: Future}``; each result is a ConsumerGroupDescription."""
        group_ids = self._group_ids(group_ids)
        timeout = self._request_timeout(request_timeout, 0)

        def describe(d: _KGroupDescription) -> ConsumerGroupDescription:
            kip848 = d.type == "consumer"
            members = [MemberDescription(m.member_id, m.client_id, m.client_host,
                                         MemberAssignment([TopicPartition(t, p) for t, p in m.assignment]),
                                         m.group_instance_id,
                                         MemberAssignment([TopicPartition(t, p) for t, p in m.target_assignment])
                                         if kip848 else None) for m in d.members]
            c = d.coordinator
            return ConsumerGroupDescription(d.group_id, d.protocol_type == "", members, d.protocol,
                                            ConsumerGroupState.of(d.state), Node(c.id, c.host, c.port, c.rack),
                                            None, ConsumerGroupType.of(d.type))

        def work() -> dict[str, Any]:
            res = self._a.describe_consumer_groups(group_ids, timeout, raise_on_error=False)
            for g, r in res.items():
                if getattr(r, "code", None) == _GROUP_ID_NOT_FOUND:
                    # librdkafka describes a group that does not exist as an empty, dead one
                    res[g] = _KGroupDescription(g, "Dead", "", "", (), r.coordinator)
            return {g: describe(r) if isinstance(r, _KGroupDescription) else r for g, r in res.items()}
        return self._dispatch({g: concurrent.futures.Future() for g in group_ids}, work)

    def delete_consumer_groups(self, group_ids: list[str],
                               request_timeout: float | None = -1) -> dict[str, Future[Any]]:
        """``{group_id: Future}``; each result is None."""
        group_ids = self._group_ids(group_ids)
        timeout = self._request_timeout(request_timeout, 0)
        return self._dispatch({g: concurrent.futures.Future() for g in group_ids},
                              lambda: self._a.delete_consumer_groups(group_ids, timeout, raise_on_error=False))

    @staticmethod
    def _one_group(request: object, verb: str, *, need_partitions: bool) -> ConsumerGroupTopicPartitions:
        if request is None:
            raise TypeError("request cannot be None")
        if not isinstance(request, list):
            raise TypeError("request must be a list")
        if len(request) != 1:
            raise ValueError(f"Currently we support {verb} offsets for a single consumer group only")
        req = request[0]
        if not isinstance(req, ConsumerGroupTopicPartitions):
            raise TypeError("Expected list of 'ConsumerGroupTopicPartitions'")
        if req.group_id is None:
            raise TypeError("'group_id' cannot be None")
        if not isinstance(req.group_id, str):
            raise TypeError("'group_id' must be a string")
        if not req.group_id:
            raise ValueError("'group_id' cannot be empty")
        tps = req.topic_partitions
        if tps is None:
            if need_partitions:
                raise ValueError("'topic_partitions' cannot be null")
            return req
        if not isinstance(tps, list):
            raise TypeError("'topic_partitions' must be a list")
        if not tps:
            raise ValueError("'topic_partitions' cannot be empty")
        for tp in tps:
            if tp is None:
                raise ValueError("Element of 'topic_partitions' cannot be None")
            if not isinstance(tp, TopicPartition):
                raise TypeError("Element of 'topic_partitions' must be of type TopicPartition")
            if not tp.topic:
                raise ValueError("Element of 'topic_partitions' must not have 'topic' attribute as Empty")
            if tp.partition < 0:
                raise ValueError("Element of 'topic_partitions' must not have negative 'partition' value")
            if need_partitions and tp.offset < 0:
                raise ValueError("Element of 'topic_partitions' must not have negative value for 'offset' field")
            if not need_partitions and tp.offset != OFFSET_INVALID:
                raise ValueError("Element of 'topic_partitions' must not have 'offset' value")
        return req

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                    require_stable: bool = False,
                                    request_timeout: float | None = -1) -> dict[str, Future[Any]]:
        """``{group_id: Future}`` (one group); the result is a ConsumerGroupTopicPartitions
        whose TopicPartitions carry the committed offsets (OFFSET_INVALID: none)."""
        req = self._one_group(list_consumer_group_offsets_request, "listing", need_partitions=False)
        g = req.group_id
        parts = None if req.topic_partitions is None else [(tp.topic, tp.partition) for tp in req.topic_partitions]
        timeout = self._request_timeout(request_timeout, 0)

        def work() -> dict[str, ConsumerGroupTopicPartitions]:
            res = self._a.list_consumer_group_offsets(g, parts, timeout, require_stable=require_stable)
            keys = parts if parts is not None else sorted(res)
            out: list[TopicPartition] = []
            for t, p in keys:
                om = res.get((t, p))
                off = om.offset if om is not None and om.offset >= 0 else OFFSET_INVALID
                out.append(TopicPartition(t, p, off, (om.metadata or None) if om else None,
                                          -1 if om is None or om.leader_epoch is None else om.leader_epoch))
            return {g: ConsumerGroupTopicPartitions(g, out)}
        return self._dispatch({g: concurrent.futures.Future()}, work)

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                     request_timeout: float | None = -1) -> dict[str, Future[Any]]:
        """``{group_id: Future}`` (one group); the result is a ConsumerGroupTopicPartitions,
        each TopicPartition with its ``error`` (None when set)."""
        req = self._one_group(alter_consumer_group_offsets_request, "altering", need_partitions=True)
        g = req.group_id
        tps: list[TopicPartition] = req.topic_partitions or []  # need_partitions: never empty
        offsets = {(tp.topic, tp.partition): _KOffset(tp.offset, tp.leader_epoch, tp.metadata or "")
                   for tp in tps}
        timeout = self._request_timeout(request_timeout, 0)

        def work() -> dict[str, ConsumerGroupTopicPartitions]:
            res = self._a.alter_consumer_group_offsets(g, offsets, timeout, raise_on_error=False)
            out: list[TopicPartition] = []
            for tp in tps:
                n = TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata,
                                   -1 if tp.leader_epoch is None else tp.leader_epoch)
                err = res.get((tp.topic, tp.partition))
                if err is not None:
                    object.__setattr__(n, "error", to_kafka_error(err))
                out.append(n)
            return {g: ConsumerGroupTopicPartitions(g, out)}
        return self._dispatch({g: concurrent.futures.Future()}, work)
