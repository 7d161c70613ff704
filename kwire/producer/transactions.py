"""The idempotent and transactional producer's state: producer id and epoch, per-partition
sequence numbers, the transaction's partitions, and how a Produce error code is to be handled.

No I/O happens here: the Producer's driver (:mod:`kwire.producer.coordinator` for the
coordinator's requests) asks this object what to do and tells it what was answered.

Sequences (KIP-98): each partition's batches carry ``base_sequence``, counting records from 0
for a (producer id, epoch); the broker keeps the last five batches per producer and partition,
answers a batch it already has with DUPLICATE_SEQUENCE_NUMBER (a success: the retry of a batch
whose answer was lost) and a gap with OUT_OF_ORDER_SEQUENCE_NUMBER.  kwire keeps one batch in
flight per partition, so a batch's sequence is fixed when it is first built and its retries
reuse the same bytes.  A new producer id or epoch restarts every partition at 0.
"""
from __future__ import annotations

import enum

from ..errors import (
    BrokerError,
    KwireError,
    ProducerFatalError,
    TransactionAbortRequiredError,
    TransactionStateError,
)

__all__ = ["TxnState", "TransactionManager", "ProduceAction", "INT32_MAX"]

INT32_MAX = 0x7FFFFFFF

# Produce / AddPartitionsToTxn / EndTxn error codes the producer treats specially
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120
CLUSTER_AUTHORIZATION_FAILED = 31

#: fatal for the producer: a newer producer owns the transactional id, or we may not write
FATAL_CODES = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         CLUSTER_AUTHORIZATION_FAILED, INVALID_PRODUCER_ID_MAPPING})
#: the coordinator is busy or has moved: ask again (after FindCoordinator for the last two)
COORDINATOR_RETRY_CODES = frozenset({CONCURRENT_TRANSACTIONS, 14, 15, 16})  # + LOAD, NOT_AVAILABLE, NOT_COORDINATOR
COORDINATOR_MOVED_CODES = frozenset({15, 16})


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"  # no producer id yet
    INITIALIZING = "initializing"    # InitProducerId on its way
    READY = "ready"                  # idle: idempotent producing, or between transactions
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"  # only abort_transaction() leaves it
    FATAL_ERROR = "fatal_error"          # terminal


_S = TxnState
_LEGAL: dict[TxnState, frozenset[TxnState]] = {  # new state -> its legal predecessors
    _S.UNINITIALIZED: frozenset(),
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.READY, _S.ABORTABLE_ERROR, _S.INITIALIZING}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING, _S.ABORTING}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING: frozenset({_S.IN_TRANSACTION}),
    _S.ABORTING: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset({_S.IN_TRANSACTION, _S.COMMITTING, _S.ABORTABLE_ERROR}),
    _S.FATAL_ERROR: frozenset(_S),
}


class ProduceAction(enum.Enum):
    SUCCESS = "success"        # DUPLICATE_SEQUENCE_NUMBER: the broker has the batch
    RETRY = "retry"            # the ordinary retriable path
    FAIL = "fail"              # the ordinary non-retriable path
    RESET_RETRY = "reset"      # new producer id (idempotent, not transactional), then retry
    ABORTABLE = "abortable"    # fail the batch; the transaction must be aborted
    FATAL = "fatal"            # fail the batch; the producer is done


class TransactionManager:
    """State of one idempotent (``transactional_id`` None) or transactional producer."""

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int):
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.epoch = -1
        self.error: KwireError | None = None  # the fatal or abortable error, when in one
        self._next_seq: dict[tuple[str, int], int] = {}
        # transaction bookkeeping
        self.partitions: set[tuple[str, int]] = set()  # added to the transaction (acknowledged)
        self.pending: set[tuple[str, int]] = set()     # produced to, not yet added
        self.offsets_added = False
        self.pid_reset_needed = False  # idempotent: a new producer id before the next send
        self.epoch_bump_needed = False  # transactional: InitProducerId again after the abort

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    def transition(self, new: TxnState) -> None:
        if self.state is _S.FATAL_ERROR:
            raise self._fatal()
        if self.state not in _LEGAL[new]:
            raise TransactionStateError(f"transactional producer: {self.state.value} -> {new.value} is not allowed")
        self.state = new

    # --- identity and sequences -------------------------------------------------------------
    def set_identity(self, producer_id: int, epoch: int) -> None:
        """A (new) producer id / epoch: every partition's sequence starts again at 0."""
        if (producer_id, epoch) != (self.producer_id, self.epoch):
            self._next_seq.clear()
        self.producer_id, self.epoch = producer_id, epoch
        self.pid_reset_needed = False
        self.epoch_bump_needed = False

    @property
    def has_identity(self) -> bool:
        return self.producer_id >= 0 and not self.pid_reset_needed

    def take_sequence(self, tp: tuple[str, int], count: int) -> int:
        """The base sequence of a new batch of ``count`` records to ``tp`` (wraps at 2^31)."""
        seq = self._next_seq.get(tp, 0)
        self._next_seq[tp] = (seq + count) & INT32_MAX
        return seq

    def reset_sequences(self) -> None:
        self._next_seq.clear()

    # --- what may be sent -------------------------------------------------------------------
    def may_send(self, tp: tuple[str, int]) -> bool:
        """True when a batch for ``tp`` may be written now; otherwise the partition is noted
        for AddPartitionsToTxn (transactional) and the batch waits."""
        if not self.has_identity or self.state is _S.FATAL_ERROR:
            return False
        if not self.transactional:
            return True
        if tp in self.partitions:
            return True
        if self.state in (_S.IN_TRANSACTION, _S.COMMITTING):
            self.pending.add(tp)
        return False

    def blocked(self, tp: tuple[str, int]) -> bool:
        """Whether ``tp``'s batches wait for a producer id or AddPartitionsToTxn (no change)."""
        if not self.has_identity or self.state is _S.FATAL_ERROR:
            return True
        return self.transactional and tp not in self.partitions

    def check_produce(self) -> None:
        """Raise when produce() is not allowed now."""
        if self.state is _S.FATAL_ERROR:
            raise self._fatal()
        if not self.transactional:
            return
        if self.state is _S.ABORTABLE_ERROR:
            raise self._abortable()
        if self.state is not _S.IN_TRANSACTION:
            raise TransactionStateError(f"produce() outside a transaction (state {self.state.value}): "
                                        "call begin_transaction() first")

    # --- errors -----------------------------------------------------------------------------
    def produce_action(self, err: KwireError, retriable: bool) -> ProduceAction:
        """How a Produce error for one batch is handled (Java's / librdkafka's rules)."""
        code = err.code if isinstance(err, BrokerError) else None
        if code == DUPLICATE_SEQUENCE_NUMBER:
            return ProduceAction.SUCCESS
        if code in FATAL_CODES:
            return ProduceAction.FATAL
        if code in (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID):
            # Transactional: the transaction is lost, the abort takes a new epoch (KIP-360).
            # Idempotent: UNKNOWN_PRODUCER_ID means the broker dropped our state (retention
            # removed the producer's last records): a new producer id, and the batch is sent
            # again.  OUT_OF_ORDER: the batch fails and the producer takes a new id, as Java
            # (KIP-360) and librdkafka (without enable.gapless.guarantee) bump the epoch.
            if self.transactional:
                return ProduceAction.ABORTABLE
            return ProduceAction.RESET_RETRY if code == UNKNOWN_PRODUCER_ID else ProduceAction.FAIL
        if code == TRANSACTION_ABORTABLE or code == INVALID_TXN_STATE:
            return ProduceAction.ABORTABLE if self.transactional else ProduceAction.FAIL
        if retriable:
            return ProduceAction.RETRY
        return ProduceAction.ABORTABLE if self.transactional else ProduceAction.FAIL

    def set_fatal(self, cause: BaseException) -> ProducerFatalError:
        if self.state is not _S.FATAL_ERROR:
            self.state = _S.FATAL_ERROR
            self.error = cause if isinstance(cause, ProducerFatalError) else ProducerFatalError(cause)
        return self._fatal()

    def set_abortable(self, cause: BaseException) -> KwireError:
        """A failed delivery or an abortable answer inside a transaction."""
        if self.state is _S.FATAL_ERROR:
            return self._fatal()
        if self.state in (_S.IN_TRANSACTION, _S.COMMITTING, _S.ABORTABLE_ERROR):
            if self.state is not _S.ABORTABLE_ERROR:
                self.error = cause if isinstance(cause, TransactionAbortRequiredError) \
                    else TransactionAbortRequiredError(cause)
            self.state = _S.ABORTABLE_ERROR
        return self._abortable()

    def _fatal(self) -> ProducerFatalError:
        err = self.error
        return err if isinstance(err, ProducerFatalError) else ProducerFatalError(err or KwireError("fatal"))

    def _abortable(self) -> TransactionAbortRequiredError:
        err = self.error
        return err if isinstance(err, TransactionAbortRequiredError) \
            else TransactionAbortRequiredError(err or KwireError("abortable"))

    # --- transaction bookkeeping -----------------------------------------------------------
    def begin(self) -> None:
        if self.state is _S.ABORTABLE_ERROR:
            raise self._abortable()
        if self.state is _S.UNINITIALIZED:
            raise TransactionStateError("begin_transaction() before init_transactions()")
        if self.state is _S.IN_TRANSACTION:
            raise TransactionStateError("begin_transaction(): a transaction is already open")
        self.transition(_S.IN_TRANSACTION)

    @property
    def failed(self) -> bool:
        """In an abortable or fatal error state."""
        return self.state in (_S.ABORTABLE_ERROR, _S.FATAL_ERROR)

    @property
    def started(self) -> bool:
        """Whether the coordinator knows the transaction (something was added to it)."""
        return bool(self.partitions) or self.offsets_added

    def finish(self) -> None:
        """After EndTxn (or nothing to end): ready for the next transaction."""
        self.partitions.clear()
        self.pending.clear()
        self.offsets_added = False
        self.error = None
        self.transition(_S.READY)

    def add_partitions_topics(self) -> dict[str, list[int]]:
        """The pending partitions by topic, for AddPartitionsToTxn."""
        out: dict[str, list[int]] = {}
        for t, p in sorted(self.pending):
            out.setdefault(t, []).append(p)
        return out
