"""The idempotent / transactional producer's state machine (kwire.producer.transactions) without
I/O: legal transitions, sequences, how each Produce error code is handled, and the errors the
calls raise; plus how kwire.confluent maps them to KafkaError's flags."""
from __future__ import annotations

import pytest

from kwire.confluent import KafkaError
from kwire.confluent._types import to_kafka_error
from kwire.errors import (
    KafkaConnectionError,
    NotLeaderOrFollowerError,
    ProducerFatalError,
    TransactionAbortRequiredError,
    TransactionStateError,
    for_code,
)
from kwire.producer.transactions import INT32_MAX, ProduceAction, TransactionManager, TxnState


def _txn(ready: bool = True) -> TransactionManager:
    tm = TransactionManager("app-1", 60_000)
    if ready:
        tm.transition(TxnState.INITIALIZING)
        tm.set_identity(7, 0)
        tm.transition(TxnState.READY)
    return tm


def test_sequences_per_partition_restart_with_a_new_identity_and_wrap():
    tm = TransactionManager(None, 60_000)
    assert not tm.has_identity and not tm.may_send(("t", 0))
    tm.set_identity(5, 0)
    assert tm.may_send(("t", 0))  # idempotent only: no transaction needed
    assert [tm.take_sequence(("t", 0), n) for n in (3, 2, 1)] == [0, 3, 5]
    assert tm.take_sequence(("t", 1), 4) == 0
    tm.set_identity(5, 0)  # the same identity keeps the sequences
    assert tm.take_sequence(("t", 0), 1) == 6
    tm.pid_reset_needed = True
    assert not tm.has_identity and not tm.may_send(("t", 0))
    tm.set_identity(9, 0)
    assert tm.take_sequence(("t", 0), 1) == 0
    tm._next_seq[("t", 0)] = INT32_MAX - 1
    assert tm.take_sequence(("t", 0), 3) == INT32_MAX - 1 and tm.take_sequence(("t", 0), 1) == 1


@pytest.mark.parametrize("code, transactional, action", [
    (46, False, ProduceAction.SUCCESS), (46, True, ProduceAction.SUCCESS),      # DUPLICATE_SEQUENCE_NUMBER
    (45, False, ProduceAction.FAIL), (45, True, ProduceAction.ABORTABLE),       # OUT_OF_ORDER_SEQUENCE_NUMBER
    (59, False, ProduceAction.RESET_RETRY), (59, True, ProduceAction.ABORTABLE),  # UNKNOWN_PRODUCER_ID
    (47, False, ProduceAction.FATAL), (47, True, ProduceAction.FATAL),          # INVALID_PRODUCER_EPOCH
    (90, True, ProduceAction.FATAL),                                            # PRODUCER_FENCED
    (53, True, ProduceAction.FATAL),                                            # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (120, True, ProduceAction.ABORTABLE),                                       # TRANSACTION_ABORTABLE
    (6, False, ProduceAction.RETRY), (6, True, ProduceAction.RETRY),            # NOT_LEADER_OR_FOLLOWER
    (10, False, ProduceAction.FAIL), (10, True, ProduceAction.ABORTABLE),       # MESSAGE_TOO_LARGE
])
def test_produce_error_codes(code, transactional, action):
    tm = TransactionManager("x" if transactional else None, 60_000)
    err = for_code(code)
    assert tm.produce_action(err, err.retriable) is action


def test_connection_errors_are_retried():
    tm = _txn()
    assert tm.produce_action(KafkaConnectionError("lost"), True) is ProduceAction.RETRY


def test_transaction_states_and_their_errors():
    tm = _txn(ready=False)
    with pytest.raises(TransactionStateError):
        tm.begin()  # before init_transactions()
    with pytest.raises(TransactionStateError):
        tm.check_produce()
    tm = _txn()
    with pytest.raises(TransactionStateError):
        tm.check_produce()  # READY: no transaction open
    tm.begin()
    with pytest.raises(TransactionStateError):
        tm.begin()
    tm.check_produce()
    # partitions wait for AddPartitionsToTxn
    assert not tm.may_send(("t", 0)) and tm.pending == {("t", 0)}
    assert tm.add_partitions_topics() == {"t": [0]}
    tm.pending.discard(("t", 0))
    tm.partitions.add(("t", 0))
    assert tm.may_send(("t", 0)) and tm.started
    tm.transition(TxnState.COMMITTING)
    tm.finish()
    assert tm.state is TxnState.READY and not tm.started and not tm.partitions
    with pytest.raises(TransactionStateError):
        tm.transition(TxnState.COMMITTING)  # only from IN_TRANSACTION


def test_abortable_error_until_abort():
    tm = _txn()
    tm.begin()
    err = tm.set_abortable(NotLeaderOrFollowerError("gone"))
    assert isinstance(err, TransactionAbortRequiredError) and isinstance(err.cause, NotLeaderOrFollowerError)
    assert tm.state is TxnState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortRequiredError):
        tm.check_produce()
    with pytest.raises(TransactionAbortRequiredError):
        tm.begin()
    assert tm.set_abortable(for_code(10)) is err  # the first cause stays
    tm.transition(TxnState.ABORTING)
    tm.finish()
    assert tm.state is TxnState.READY and tm.error is None
    tm.begin()  # a new transaction


def test_fatal_is_terminal():
    tm = _txn()
    tm.begin()
    fatal = tm.set_fatal(for_code(90))
    assert isinstance(fatal, ProducerFatalError) and fatal.cause.code == 90
    for call in (tm.begin, tm.check_produce, lambda: tm.transition(TxnState.ABORTING)):
        with pytest.raises(ProducerFatalError):
            call()
    assert not tm.may_send(("t", 0))
    assert tm.set_abortable(for_code(10)) is fatal  # stays fatal


def test_confluent_error_flags():
    fenced = to_kafka_error(ProducerFatalError(for_code(90)))
    assert (fenced.code(), fenced.fatal(), fenced.txn_requires_abort()) == (KafkaError._FENCED, True, False)
    auth = to_kafka_error(ProducerFatalError(for_code(53)))
    assert (auth.code(), auth.fatal()) == (53, True)
    abortable = to_kafka_error(TransactionAbortRequiredError(for_code(6)))
    assert (abortable.code(), abortable.fatal(), abortable.txn_requires_abort()) == (6, False, True)
    state = to_kafka_error(TransactionStateError("x"))
    assert (state.code(), state.fatal()) == (KafkaError._STATE, False)
