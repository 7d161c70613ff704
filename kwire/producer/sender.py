"""The producer's sending half: which batches go now, Produce requests, their answers,
retries, and delivery reports.  Mixed into :class:`kwire.producer.Producer`, which owns the
state it uses (queues, metadata, the network client, the idempotence state); the driver loop
(``Producer._drive``) calls it."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ..errors import (
    BrokerError,
    KafkaConnectionError,
    KafkaTimeoutError,
    KwireError,
    ProtocolError,
    for_code,
)
from ..net import now_ms
from ..protocol.schema import ZERO_UUID
from .batch import TIMESTAMP_LOG_APPEND_TIME, Batch, DeliveryReport
from .transactions import ProduceAction, TransactionManager, TxnState

if TYPE_CHECKING:
    from ..config import Config
    from ..net import Metadata, NetworkClient
    from ..stats import ProducerStats
    from .coordinator import TxnCoordinatorClient

__all__ = ["SenderMixin"]

_UNKNOWN_TOPIC = 3
_UNKNOWN_PARTITION_MSG = "partition does not exist"


class SenderMixin:
    """Sending and answers (see the module docstring)."""

    config: Config
    _net: NetworkClient
    _md: Metadata
    _tm: TransactionManager | None
    _txc: TxnCoordinatorClient | None
    _stats: ProducerStats | None
    _batches: dict[tuple[str, int], deque[Batch]]
    _parked: dict[str, deque[DeliveryReport]]
    _busy: set[tuple[str, int]]
    _flying: dict[int, Batch]
    _reports: deque[DeliveryReport]
    _outstanding: int
    _linger_ms: int
    _acks: int
    _compression: str
    _request_timeout_ms: int
    _retries: int
    _retry_backoff_ms: int
    _delivery_timeout_ms: int
    _build_batch: Any

    if TYPE_CHECKING:
        def __len__(self) -> int: ...  # Producer's (records outstanding; the statistics read it)

    def _close_batch(self, b: Batch) -> None:  # pragma: no cover - Producer's
        raise NotImplementedError

    def _send_ready(self, now: int, flushing: bool) -> None:
        by_node: dict[int, list[Batch]] = {}
        for tp, q in self._batches.items():
            if not q or tp in self._busy:
                continue
            b = q[0]
            if b.attempts and now < b.next_attempt_ms:
                continue
            if b.stale_metadata_ms >= 0:
                # the leader was wrong: retry only once metadata newer than that answer came
                # (else the retry goes to the same stale leader, as a race with the refresh)
                if self._md.updated_ms <= b.stale_metadata_ms:
                    self._md.request_update()
                    continue
                b.stale_metadata_ms = -1
            if self._tm is not None and not self._tm.may_send(tp):
                continue  # no producer id yet, or not yet added to the transaction
            if not (flushing or b.closed or len(q) > 1 or b.attempts or
                    now - b.created_ms >= self._linger_ms):
                continue
            info = self._md.topic(tp[0])
            if info is not None and info.partitions and tp[1] not in info.partitions \
                    and self._md.updated_ms > b.created_ms:
                q.popleft()
                for msg in b.msgs:
                    self._report(msg, for_code(_UNKNOWN_TOPIC, f"{tp[0]}[{tp[1]}]: {_UNKNOWN_PARTITION_MSG}"), now)
                continue
            leader = self._md.leader_for(*tp)
            if leader is None:
                self._md.add_topics([tp[0]])
                self._md.request_update()
                continue
            q.popleft()
            self._close_batch(b)
            self._busy.add(tp)
            by_node.setdefault(leader, []).append(b)
        for node, batches in by_node.items():
            self._send_produce(node, batches)
        tm = self._tm
        if tm is not None and tm.state is not TxnState.FATAL_ERROR:
            assert self._txc is not None
            if not tm.transactional and not tm.has_identity and self._batches_waiting():
                self._txc.start_init_pid()
            elif tm.transactional and tm.pending:
                self._txc.maybe_add_partitions(now)

    def _batches_waiting(self) -> bool:
        return any(self._batches.values())

    def _send_produce(self, node: int, batches: list[Batch]) -> None:
        tm = self._tm
        for b in batches:
            if tm is not None and b.identity != (tm.producer_id, tm.epoch):
                b.payload = None  # a new producer id / epoch: the batch takes a new sequence
            if b.payload is None:
                idem: dict[str, Any] = {}
                if tm is not None:
                    b.identity = (tm.producer_id, tm.epoch)
                    idem = {"producer_id": tm.producer_id, "producer_epoch": tm.epoch,
                            "base_sequence": tm.take_sequence(b.tp, len(b.msgs)),
                            "is_transactional": tm.transactional}
                b.payload = self._build_batch(
                    [(m._key, m._value, m._headers, m._timestamp_ms) for m in b.msgs],
                    compression=self._compression, **idem)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for b in batches:
            by_topic.setdefault(b.tp[0], []).append({"index": b.tp[1], "records": b.payload})
        topic_ids = {t: self._md.topic_id(t) for t in by_topic}
        acks, timeout_ms = self._acks, self._request_timeout_ms
        txn_id = None if tm is None else tm.transactional_id

        def body(version: int) -> dict[str, Any]:
            return {"transactional_id": txn_id, "acks": acks, "timeout_ms": timeout_ms,
                    "topic_data": [{"name": t, "topic_id": topic_ids[t] or ZERO_UUID, "partition_data": parts}
                                   for t, parts in by_topic.items()]}

        # Produce v13 names topics by id only: use it only when every id is known.
        max_version = None if all(topic_ids.values()) else 12
        if txn_id is not None:
            # v12+ adds partitions to the transaction implicitly (KIP-890 part 2) and goes with
            # EndTxn v5's epoch bumps; kwire adds them with AddPartitionsToTxn, as librdkafka
            max_version = 11
        if self._stats is not None:
            self._stats.on_send(batches)
        for b in batches:
            self._flying[id(b)] = b
        f = self._net.send(node, "Produce", body, timeout_ms=timeout_ms, max_version=max_version)
        names = {tid: t for t, tid in topic_ids.items() if tid}
        f.add_callback(lambda f: self._on_produce(f, batches, names))

    def _on_produce(self, f: Any, batches: list[Batch], names_by_id: dict[Any, str]) -> None:
        now = now_ms()
        for b in batches:
            self._busy.discard(b.tp)
            self._flying.pop(id(b), None)
        if self._stats is not None:
            self._stats.on_done(batches)
        if any(b.purged for b in batches):  # reported by purge() already
            batches = [b for b in batches if not b.purged]
        if f.error is not None:
            if isinstance(f.error, (KafkaConnectionError, KafkaTimeoutError)):
                self._md.request_update()  # the leader may have moved
            for b in batches:
                self._retry_or_fail(b, f.error, now)
            return
        if f.response is None:  # acks=0: written is all we will ever know
            for b in batches:
                if self._stats is not None:
                    self._stats.on_acked(b)
                for msg in b.msgs:
                    self._report(msg, None, now)
            return
        results = {}
        for t in f.response.get("responses", ()):
            name = t.get("name") or names_by_id.get(t.get("topic_id"))
            for p in t.get("partition_responses", ()):
                results[(name, p["index"])] = p
        for b in batches:
            pr = results.get(b.tp)
            if pr is None:
                self._retry_or_fail(b, ProtocolError(f"Produce response lacks {b.tp[0]}[{b.tp[1]}]"), now)
                continue
            code = pr["error_code"]
            if code:
                err = for_code(code, pr.get("error_message"))
                if err.invalid_metadata:
                    self._md.request_update()
                    b.stale_metadata_ms = self._md.updated_ms
                self._retry_or_fail(b, err, now)
                continue
            self._acked(b, pr["base_offset"], pr.get("log_append_time_ms", -1), now)

    def _acked(self, b: Batch, base: int, append_ms: int | None, now: int) -> None:
        if self._stats is not None:
            self._stats.on_acked(b)
        for i, msg in enumerate(b.msgs):
            msg._offset = base + i if base >= 0 else -1
            # Like the Java client, trust a log-append time when the broker sends one.
            # (librdkafka's mock cluster always sends 1234, whatever the topic's
            # timestamp type; create_timestamp() still has the record's own.)
            if append_ms is not None and append_ms >= 0:
                msg._timestamp_type = TIMESTAMP_LOG_APPEND_TIME
                msg._timestamp_ms = append_ms
            self._report(msg, None, now)

    def _retry_or_fail(self, b: Batch, err: KwireError, now: int) -> None:
        retriable = isinstance(err, (KafkaConnectionError, KafkaTimeoutError)) or \
            (isinstance(err, BrokerError) and err.retriable)
        tm = self._tm
        if tm is not None:
            action = tm.produce_action(err, retriable)
            if action is ProduceAction.SUCCESS:  # DUPLICATE_SEQUENCE_NUMBER: written before
                self._acked(b, -1, None, now)
                return
            if action is ProduceAction.RESET_RETRY:
                tm.pid_reset_needed = True  # a new producer id; the batch gets a new sequence
                retriable = True
            elif action is ProduceAction.FATAL:
                tm.set_fatal(err)
                retriable = False
            elif action is ProduceAction.ABORTABLE:
                retriable = False
        first = b.msgs[0]._created_ms
        if retriable and b.attempts < self._retries and now - first < self._delivery_timeout_ms:
            b.attempts += 1
            b.next_attempt_ms = now + self._retry_backoff_ms
            self._batches.setdefault(b.tp, deque()).appendleft(b)
            return
        if tm is not None and b.payload is not None:
            self._sequence_gap()  # the broker may or may not have this batch
        for msg in b.msgs:
            self._report(msg, err, now)

    def _sequence_gap(self) -> None:
        """A batch that was sent failed for good: its sequence numbers may be missing at the
        broker, so the next batch would be out of order.  Idempotent: a new producer id;
        transactional: the abort takes a new epoch (InitProducerId again)."""
        assert self._tm is not None
        if self._tm.transactional:
            self._tm.epoch_bump_needed = True
        else:
            self._tm.pid_reset_needed = True

    def _report(self, msg: DeliveryReport, err: KwireError | None, now: int) -> None:
        if err is not None and self._tm is not None and self._tm.transactional:
            self._tm.set_abortable(err)  # a record of the transaction failed: abort it
        msg._error = err
        msg._delivered_ms = now
        if err is not None:
            msg._offset = -1001
        self._reports.append(msg)

    def _serve_reports(self) -> int:
        if self._stats is not None:
            self._stats.maybe_emit(self, now_ms())
        served = 0
        while self._reports:
            msg = self._reports.popleft()
            self._outstanding -= 1
            served += 1
            cb = msg._on_delivery
            if cb is not None:
                cb(msg._error, msg)
        return served
