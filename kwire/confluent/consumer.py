"""confluent-kafka's Consumer over :class:`kwire.Consumer`.

One kwire Consumer does the work; this class converts at the edges: records become
:class:`Message` wrappers (one small object per record, no field copied), kwire's events and
exceptions become error messages and KafkaExceptions, callbacks get confluent's types.

Consumer is the group, assignment, metadata and lifecycle calls; the rest is split out as
AdminClient's is: ``_consumer_base`` (its kwire Consumer, the batch poll() holds, the shared
argument and exception handling), ``_consumer_records`` (poll(), consume() and the error
messages they return), ``_consumer_offsets`` (commit, store_offsets, committed, position, seek,
watermarks, offsets_for_times).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ..consumer import GroupMetadata
from ..errors import KwireError
from ._consumer_base import _ck_timeout, _in
from ._consumer_offsets import _OffsetCalls
from ._consumer_records import _RecordCalls
from ._types import KafkaError, KafkaException, TopicPartition, _tps, to_kafka_exception

if TYPE_CHECKING:
    from .admin import ClusterMetadata  # (imported when called: it pulls in the admin client)

# on_assign / on_revoke / on_lost: called with the Consumer and a list of TopicPartitions
_Callback = Callable[["Consumer", list[TopicPartition]], object]


class Consumer(_RecordCalls, _OffsetCalls):
    """confluent-kafka's ``Consumer(conf)`` (or ``Consumer(**conf)``) over kwire.

    ``poll()`` returns a :class:`Message` or None; error messages (``msg.error()`` not None)
    carry ``_PARTITION_EOF`` (with ``enable.partition.eof``), ``UNKNOWN_TOPIC_OR_PART`` for a
    subscribed topic the cluster does not have, and consumer errors kwire raises.  Every method
    raises ``RuntimeError("Consumer closed")`` after close().
    """

    # --- group and assignment ---------------------------------------------------------------

    def _wrap_cb(self, cb: _Callback | None) -> Callable[[Any, list[Any]], object] | None:
        if cb is None:
            return None
        return lambda _c, parts: cb(self, [TopicPartition(p.topic, p.partition) for p in parts])

    def subscribe(self, topics: list[str], on_assign: _Callback | None = None,
                  on_revoke: _Callback | None = None, on_lost: _Callback | None = None) -> None:
        self._check()
        if not isinstance(topics, list):
            raise TypeError("expected list of topic unicode strings")
        for cb in (on_assign, on_revoke, on_lost):
            if cb is not None and not callable(cb):
                raise TypeError("expected callable")
        self._topics = list(topics)
        self._manual = None
        self._reported_missing.clear()
        self._next_check = 0.0
        try:
            self._c.subscribe(topics, on_assign=self._wrap_cb(on_assign),
                              on_revoke=self._wrap_cb(on_revoke), on_lost=self._wrap_cb(on_lost))
        except KwireError as exc:
            raise to_kafka_exception(exc) from None

    def unsubscribe(self) -> None:
        self._check()
        self._topics = []
        self._manual = None
        self._unread()
        self._call(self._c.unsubscribe)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        parts = _in(partitions)
        self._unread()
        self._call(self._c.assign, parts)
        if not self._topics:
            self._manual = {(p.topic, p.partition): None for p in parts}

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        parts = _in(partitions)
        self._call(self._c.incremental_assign, parts)
        if not self._topics:
            self._manual = dict(self._manual or {})
            self._manual.update({(p.topic, p.partition): None for p in parts})

    def unassign(self) -> None:
        self._check()
        self._unread()
        self._call(self._c.unassign)
        self._manual = None if self._topics else {}

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        parts = _in(partitions)
        self._unread({(p.topic, p.partition) for p in parts})
        self._call(self._c.incremental_unassign, parts)
        if self._manual is not None:
            for p in parts:
                self._manual.pop((p.topic, p.partition), None)

    def assignment(self) -> list[TopicPartition]:
        self._check()
        if self._manual is not None:
            return [TopicPartition(t, p) for t, p in self._manual]
        return _tps(self._c.assignment())

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._check()
        parts = _in(partitions)
        self._unread({(p.topic, p.partition) for p in parts})
        self._call(self._c.pause, parts)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._check()
        self._call(self._c.resume, _in(partitions))

    # --- cluster and group metadata ---------------------------------------------------------

    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> ClusterMetadata:
        self._check()
        from .admin import _cluster_metadata
        return _cluster_metadata(self._call(self._c.list_topics, topic, _ck_timeout(timeout)))

    def memberid(self) -> str | None:
        self._check()
        return getattr(self._c._coord, "member_id", None) or None

    def cluster_id(self, timeout: float | None = -1) -> str | None:
        """The cluster id the brokers report (None when they report none)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        cid: str | None = self._c._net.metadata.cluster_id
        if cid is None:
            try:
                cid = self._c.list_topics(None, _ck_timeout(timeout)).cluster_id
            except KwireError as exc:
                raise to_kafka_exception(exc) from None
        return cid

    def consumer_group_metadata(self) -> GroupMetadata:
        """The group membership for Producer.send_offsets_to_transaction() (kwire's
        :class:`~kwire.consumer.GroupMetadata`; confluent-kafka's is opaque)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        try:
            return self._c.consumer_group_metadata()
        except KwireError as exc:
            raise to_kafka_exception(exc) from None

    # --- lifecycle ----------------------------------------------------------------------------

    def set_sasl_credentials(self, username: str, password: str) -> None:
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                        "kwire takes SASL credentials from the configuration only"))

    def close(self) -> None:
        """Revoke (on_revoke), commit (auto commit), leave the group, stop.  Closing again does
        nothing (as confluent-kafka 2.x)."""
        if self._closed:
            return None
        self._closed = True
        self._unread()
        try:
            self._c.close()
        finally:
            if self._logger is not None:
                logging.getLogger("kwire").removeHandler(self._log_handler)
        return None

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if not self._closed:
            self.close()
        return False
