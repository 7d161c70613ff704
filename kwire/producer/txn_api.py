"""The Producer's transactional calls (confluent-kafka's names and meaning; timeouts in
seconds, None: ``transaction.timeout.ms``):

    p = Producer({"bootstrap.servers": ..., "transactional.id": "my-app-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("out", b"v")
    p.send_offsets_to_transaction(consumer.position(...), consumer.consumer_group_metadata())
    p.commit_transaction(30)      # or abort_transaction(30)

Errors: :class:`~kwire.errors.ProducerFatalError` (fenced, unauthorized: make a new producer),
:class:`~kwire.errors.TransactionAbortRequiredError` (call abort_transaction()),
:class:`~kwire.errors.KafkaTimeoutError` (retriable: call the same method again),
:class:`~kwire.errors.TransactionStateError` (a call out of order).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    BrokerError,
    KafkaTimeoutError,
    KwireError,
    NotTransactionalError,
    ProducerFatalError,
    TransactionAbortRequiredError,
    TransactionStateError,
)
from ..net import now_ms
from .transactions import FATAL_CODES, TransactionManager, TxnState

if TYPE_CHECKING:
    from .coordinator import TxnCoordinatorClient

__all__ = ["TransactionsMixin"]


class TransactionsMixin:
    """Mixed into :class:`kwire.producer.Producer` (which owns ``_tm``, ``_txc``, flush, purge)."""

    _tm: TransactionManager | None
    _txc: TxnCoordinatorClient | None

    # (provided by Producer)
    def flush(self, timeout: float | None = None) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:  # pragma: no cover
        raise NotImplementedError

    def _txn(self) -> tuple[TransactionManager, TxnCoordinatorClient]:
        if self._tm is None or not self._tm.transactional or self._txc is None:
            raise NotTransactionalError("the producer is not transactional: set transactional.id")
        if self._tm.state is TxnState.FATAL_ERROR:
            raise self._tm.set_fatal(KwireError())
        return self._tm, self._txc

    def _deadline(self, timeout: float | None, tm: TransactionManager) -> int:
        if timeout is None or timeout < 0:
            return now_ms() + tm.transaction_timeout_ms
        return now_ms() + int(timeout * 1000)

    def _fail(self, tm: TransactionManager, exc: BaseException, *, abortable: bool) -> KwireError:
        """The error to raise for a failed coordinator call."""
        if isinstance(exc, (ProducerFatalError, TransactionAbortRequiredError, TransactionStateError,
                            KafkaTimeoutError)):
            return exc
        if isinstance(exc, BrokerError) and exc.code in FATAL_CODES or not abortable:
            return tm.set_fatal(exc)
        return tm.set_abortable(exc)

    # --- the calls -----------------------------------------------------------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Find the transaction coordinator and take the producer id for ``transactional.id``
        (fencing older producers with that id and ending their open transaction).  Call once,
        before the first transaction; after a KafkaTimeoutError it may be called again."""
        tm, txc = self._txn()
        if tm.state is TxnState.READY:
            return
        if tm.state is not TxnState.INITIALIZING:
            tm.transition(TxnState.INITIALIZING)
        try:
            txc.init_producer_id(self._deadline(timeout, tm))
        except KwireError as exc:
            raise self._fail(tm, exc, abortable=False) from None
        tm.transition(TxnState.READY)

    def begin_transaction(self) -> None:
        """Start a transaction (no request: the coordinator learns of it from the first
        AddPartitionsToTxn / AddOffsetsToTxn)."""
        tm, _ = self._txn()
        tm.begin()

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit ``offsets`` for the consumer group of ``group_metadata`` (from
        ``Consumer.consumer_group_metadata()``) as part of the transaction: they count only if
        it commits.  ``offsets``: TopicPartitions with the next offset to read (as
        ``Consumer.position()`` gives), or ``{(topic, partition): offset}``."""
        tm, txc = self._txn()
        if tm.state is TxnState.ABORTABLE_ERROR:
            raise tm.set_abortable(KwireError())
        if tm.state is not TxnState.IN_TRANSACTION:
            raise TransactionStateError("send_offsets_to_transaction() outside a transaction")
        group = _group(group_metadata)
        by_topic = _offsets_by_topic(offsets)
        if not by_topic:
            return
        deadline = self._deadline(timeout, tm)
        try:
            if not tm.offsets_added:
                txc.add_offsets(group.group_id, deadline)
            txc.txn_offset_commit(group, by_topic, deadline)
        except KwireError as exc:
            raise self._fail(tm, exc, abortable=True) from None

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush the transaction's records, then commit it (EndTxn).  A KafkaTimeoutError is
        retriable: call commit_transaction() again; TransactionAbortRequiredError: abort."""
        tm, txc = self._txn()
        if tm.state is TxnState.ABORTABLE_ERROR:
            raise tm.set_abortable(KwireError())
        if tm.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            raise TransactionStateError(f"commit_transaction() in state {tm.state.value}")
        deadline = self._deadline(timeout, tm)
        if tm.state is TxnState.IN_TRANSACTION:
            left = self.flush(max(0, deadline - now_ms()) / 1000)
            if tm.failed:  # a record of the transaction failed while flushing
                raise tm.error if tm.error is not None else tm.set_abortable(KwireError())
            if left:
                raise KafkaTimeoutError(f"commit_transaction(): {left} records not yet delivered")
            tm.transition(TxnState.COMMITTING)
        try:
            if tm.started:
                txc.end_txn(True, deadline)
        except KwireError as exc:
            raise self._fail(tm, exc, abortable=True) from None
        tm.finish()

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the records not yet sent, wait for those in flight, and abort the transaction
        (EndTxn): read_committed consumers never see its records, its offsets do not count."""
        tm, txc = self._txn()
        if tm.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            raise TransactionStateError(f"abort_transaction() in state {tm.state.value}")
        deadline = self._deadline(timeout, tm)
        if tm.state is not TxnState.ABORTING:
            tm.transition(TxnState.ABORTING)
        self.purge(in_queue=True, in_flight=False)
        tm.pending.clear()
        left = self.flush(max(0, deadline - now_ms()) / 1000)
        if left:
            raise KafkaTimeoutError(f"abort_transaction(): {left} records still in flight")
        try:
            if tm.started:
                txc.end_txn(False, deadline)
            if tm.epoch_bump_needed:  # sequences may have gaps: a new epoch starts them at 0
                txc.init_producer_id(deadline)
        except KwireError as exc:
            raise self._fail(tm, exc, abortable=False) from None
        tm.finish()


class _Group:
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")

    def __init__(self, group_id: str, generation_id: int = -1, member_id: str = "",
                 group_instance_id: str | None = None):
        self.group_id, self.generation_id = group_id, generation_id
        self.member_id, self.group_instance_id = member_id, group_instance_id


def _group(meta: Any) -> _Group:
    """A consumer's group metadata (kwire's or kwire.confluent's), or a group id (str)."""
    if isinstance(meta, str):
        return _Group(meta)
    gid = getattr(meta, "group_id", None)
    if not isinstance(gid, str) or not gid:
        raise TypeError("group_metadata must come from Consumer.consumer_group_metadata()")
    return _Group(gid, int(getattr(meta, "generation_id", -1)), getattr(meta, "member_id", "") or "",
                  getattr(meta, "group_instance_id", None))


def _offset(value: Any) -> int:
    """An offset, or an OffsetAndMetadata's."""
    return int(value if isinstance(value, int) else value.offset)


def _offsets_by_topic(offsets: Any) -> dict[str, list[dict[str, Any]]]:
    items: Iterable[tuple[str, int, int, str | None, int | None]]
    if isinstance(offsets, Mapping):
        items = [(t, p, _offset(o), getattr(o, "metadata", None), getattr(o, "leader_epoch", None))
                 for (t, p), o in offsets.items()]
    else:
        items = [(tp.topic, tp.partition, int(tp.offset), getattr(tp, "metadata", None),
                  getattr(tp, "leader_epoch", None)) for tp in offsets]
    out: dict[str, list[dict[str, Any]]] = {}
    for t, p, off, meta, epoch in items:
        if off < 0:
            raise ValueError(f"offset {off} for {t}[{p}] is not an offset to commit")
        out.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                      "committed_leader_epoch": -1 if epoch is None or epoch < 0 else epoch,
                                      "committed_metadata": meta or ""})
    return out
