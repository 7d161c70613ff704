"""kwire's idempotent and transactional producer on Apache Kafka 4.3 (issue 17).

* a retry after a lost Produce response writes the batch once with enable.idempotence, twice
  without (the second shows the fault was real: the broker had appended the batch before the
  client dropped the connection);
* interleaved committed and aborted transactions across partitions: kwire's read_committed
  Consumer and confluent-kafka's both return exactly the committed records, read_uncommitted
  every record;
* consume-transform-produce: the group's committed offsets move on commit, not on abort;
* a second producer with the same transactional.id fences the first (ProducerFatalError;
  through kwire.confluent a fatal KafkaError, as confluent-kafka raises);
* one confluent-kafka transactional program, run through kwire.confluent and confluent_kafka on
  the same broker, prints the same.
"""
from __future__ import annotations

import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import kwire.confluent as kc
from kwire import TopicPartition
from kwire.consumer import OFFSET_BEGINNING, Consumer
from kwire.errors import (
    ConfigError,
    InvalidProducerEpochError,
    ProducerFatalError,
    ProducerFencedError,
    TransactionAbortRequiredError,
    TransactionStateError,
)
from kwire.producer import Producer

PARTITIONS = 3


def _topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(20)
    return name


def _hw(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe",
                                  "isolation.level": "read_committed"})
    try:
        return {p: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=20)[1]
                for p in range(partitions)}
    finally:
        c.close()


def _read_kwire(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS) -> list:
    """Every record kwire's Consumer returns, from the beginning to the partitions' ends as
    confluent-kafka reports them, as (partition, value) in log order per partition."""
    ends = _hw(bootstrap, topic, partitions)
    got: list = []
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                   "fetch.wait.max.ms": 100}) as c:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while True:
            got.extend((r.partition, r.offset, r.value) for r in c.consume(500, timeout=0.1))
            pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(partitions)])}
            if all(pos[p] >= ends[p] for p in range(partitions)):
                break
            assert time.monotonic() < deadline, f"positions {pos} never reached {ends}"
    return [(p, v) for p, _, v in sorted(got)]


def _read_confluent(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS) -> list:
    ends = _hw(bootstrap, topic, partitions)
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                  "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])
    got = []
    eof: set = set()
    deadline = time.monotonic() + 30
    try:
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"no EOF on every partition ({eof}; ends {ends})"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    if m.offset() >= ends[m.partition()]:
                        eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            got.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return [(p, v) for p, _, v in sorted(got)]


def _flushed(p, n_expected: int) -> list:
    """Flush; the delivery reports' (partition, value)."""
    assert p.flush(30) == 0
    return n_expected


# --- configuration -------------------------------------------------------------------------------

def test_idempotence_configuration_conflicts_are_config_errors():
    with pytest.raises(ConfigError, match="acks"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "acks": 1})
    with pytest.raises(ConfigError, match="retries"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "retries": 0})
    with pytest.raises(ConfigError, match="enable.idempotence"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t", "enable.idempotence": False})
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t"})
    try:
        assert p.config.enable_idempotence is True
        with pytest.raises(TransactionStateError):
            p.produce("t", b"v")  # outside a transaction
        with pytest.raises(TransactionStateError):
            p.begin_transaction()  # before init_transactions()
    finally:
        p.close(0)


# --- idempotence: a retry after a lost response ------------------------------------------------

def _write_with_lost_response(bootstrap: str, topic: str, idempotent: bool) -> list:
    """Produce ``before`` records, then one record whose Produce response is lost: the broker
    appends it (watched through ListOffsets while the producer does not read its socket), the
    producer drops the connection before reading the answer and retries.  Then ``after``
    records.  Returns what the log holds, as values in order, and the value whose answer was
    lost (attempts answered before the connection could be dropped are ordinary records)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": idempotent,
                  "retry.backoff.ms": 50})
    reports = []

    def report(err, msg):
        assert err is None, err
        reports.append(msg.value())

    try:
        for i in range(3):
            p.produce(topic, b"before-%d" % i, partition=0, on_delivery=report)
        assert p.flush(30) == 0
        leader = p._md.leader_for(topic, 0)
        injected = None
        for attempt in range(20):
            start = _hw(bootstrap, topic, 1)[0]
            value = b"lost-response-%d" % attempt
            p.produce(topic, value, partition=0, on_delivery=report)
            while p.network.in_flight_count(leader) == 0 and not reports[-1:] == [value]:
                p.poll(0)
            if reports[-1:] == [value]:
                continue  # answered within the same poll: try again
            deadline = time.monotonic() + 10
            while _hw(bootstrap, topic, 1)[0] == start and time.monotonic() < deadline:
                time.sleep(0.05)  # the producer does not poll: its answer stays unread
            assert _hw(bootstrap, topic, 1)[0] > start, "the broker never appended the batch"
            p.network.disconnect(leader)  # the answer is lost; the batch is retried
            injected = value
            break
        assert injected is not None
        for i in range(3):
            p.produce(topic, b"after-%d" % i, partition=0, on_delivery=report)
        assert p.flush(30) == 0
        assert len(reports) == len(set(reports))  # each record reported once, successfully
        assert reports[-4:] == [injected, b"after-0", b"after-1", b"after-2"]
    finally:
        p.close(10)
    return [v for _, v in _read_kwire(bootstrap, topic, "read_uncommitted", 1)], injected


def test_idempotent_retry_writes_each_record_once(kafka_version):
    kafka = kafka_version
    topic = _topic(kafka.bootstrap, 1)
    log, lost = _write_with_lost_response(kafka.bootstrap, topic, idempotent=True)
    answered = [v for v in log if v.startswith(b"lost") and v != lost]  # attempts not cut off
    assert log == [b"before-0", b"before-1", b"before-2", *answered, lost, b"after-0", b"after-1", b"after-2"]


def test_without_idempotence_the_same_retry_duplicates(kafka):
    """The control: the fault above is real (without sequences the retry is written again)."""
    topic = _topic(kafka.bootstrap, 1)
    log, lost = _write_with_lost_response(kafka.bootstrap, topic, idempotent=False)
    assert log.count(lost) == 2, log


# --- transactions ----------------------------------------------------------------------------

def _txn_producer(bootstrap: str, txn_id: str, **cfg) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **cfg})
    p.init_transactions(30)
    return p


def test_interleaved_transactions_read_committed_and_uncommitted(kafka_version):
    bs = kafka_version.bootstrap
    topic = _topic(bs)
    a = _txn_producer(bs, f"{topic}-a")
    b = _txn_producer(bs, f"{topic}-b")
    plain = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    committed, everything = [], []
    try:
        def send(p, label, parts, n):
            out = []
            for part in parts:
                for i in range(n):
                    v = b"%s-p%d-%d" % (label.encode(), part, i)
                    p.produce(topic, v, partition=part)
                    out.append((part, v))
            return out

        a.begin_transaction()
        b.begin_transaction()
        ra = send(a, "a1", [0, 1], 4)
        rb = send(b, "b1", [1, 2], 3)
        a.flush(30)
        b.flush(30)
        rp = send(plain, "plain", [0, 2], 2)
        assert plain.flush(30) == 0
        a.commit_transaction(30)
        b.abort_transaction(30)
        committed += ra + rp
        everything += ra + rb + rp
        b.begin_transaction()
        rb2 = send(b, "b2", [0, 1, 2], 2)
        b.commit_transaction(30)
        a.begin_transaction()
        ra2 = send(a, "a2", [2], 5)
        assert a.flush(30) == 0  # in the log (an abort drops what is still queued)
        a.abort_transaction(30)
        committed += rb2
        everything += rb2 + ra2
    finally:
        for p in (a, b, plain):
            p.close(10)

    def per_partition(records):
        return {p: [v for q, v in records if q == p] for p in range(PARTITIONS)}

    for isolation, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        got_k = _read_kwire(bs, topic, isolation)
        got_c = _read_confluent(bs, topic, isolation)
        assert sorted(got_k) == sorted(expected), isolation
        assert got_k == got_c, isolation  # the reference reads the same, in the same order
        # within a partition, each producer's records keep their order
        for part, values in per_partition(got_k).items():
            for label in ("a1", "a2", "b1", "b2", "plain"):
                mine = [v for v in values if v.startswith(label.encode() + b"-")]
                assert mine == sorted(mine, key=lambda v: int(v.rsplit(b"-", 1)[1])), (part, label)


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_consume_transform_produce_offsets_move_only_on_commit(kafka, group_protocol):
    """The group's offsets go with the transaction, for a classic member (generation) and a
    KIP-848 one (member epoch)."""
    bs = kafka.bootstrap
    src, dst = _topic(bs, 1), _topic(bs, 1)
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    feeder = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(20):
        feeder.produce(src, b"in-%d" % i, partition=0)
    assert feeder.flush(30) == 0
    feeder.close()
    p = _txn_producer(bs, f"{group}-txn")
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "fetch.wait.max.ms": 100, "group.protocol": group_protocol})
    try:
        c.subscribe([src])
        batch: list = []
        deadline = time.monotonic() + 60
        while len(batch) < 10:
            assert time.monotonic() < deadline
            batch.extend(c.consume(10 - len(batch), timeout=0.5))
        meta = c.consumer_group_metadata()
        assert meta.group_id == group and meta.member_id and meta.generation_id >= 1

        def transform_and_send(records):
            p.begin_transaction()
            for r in records:
                p.produce(dst, r.value.replace(b"in-", b"out-"), partition=0)
            assert p.flush(30) == 0  # in the log, so the aborted copy is there to be skipped
            tp = TopicPartition(src, 0, records[-1].offset + 1)
            p.send_offsets_to_transaction([tp], c.consumer_group_metadata(), 30)

        transform_and_send(batch)
        p.abort_transaction(30)
        assert [tp.offset for tp in c.committed([TopicPartition(src, 0)], timeout=10)] == [-1001]
        transform_and_send(batch)
        p.commit_transaction(30)
        assert [tp.offset for tp in c.committed([TopicPartition(src, 0)], timeout=10)] == [10]
    finally:
        c.close()
        p.close(10)
    out = [v for _, v in _read_kwire(bs, dst, "read_committed", 1)]
    assert out == [b"out-%d" % i for i in range(10)]
    # the aborted copy is in the log, invisible to read_committed
    assert len(_read_kwire(bs, dst, "read_uncommitted", 1)) == 20


# --- fencing -----------------------------------------------------------------------------------

def test_second_producer_with_the_same_id_fences_the_first(kafka):
    bs = kafka.bootstrap
    topic = _topic(bs)
    txn_id = f"{topic}-fence"
    old = _txn_producer(bs, txn_id)
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    assert old.flush(30) == 0
    new = _txn_producer(bs, txn_id)  # fences `old` and aborts its open transaction
    try:
        new.begin_transaction()
        new.produce(topic, b"alive", partition=0)
        new.commit_transaction(30)
        with pytest.raises(ProducerFatalError) as info:
            old.produce(topic, b"zombie-2", partition=0)
            old.commit_transaction(30)
        assert isinstance(info.value.cause, (ProducerFencedError, InvalidProducerEpochError))
        with pytest.raises(ProducerFatalError):  # and it stays fatal
            old.begin_transaction()
    finally:
        old.close(1)
        new.close(10)
    assert [v for _, v in _read_kwire(bs, topic, "read_committed")] == [b"alive"]


# --- the same program through kwire.confluent and confluent_kafka ------------------------------

def _read_eof(ck, c, partitions: int) -> list:
    """Poll ``c`` until every partition reported EOF; the (partition, offset, value) read."""
    eof, got = set(), []
    deadline = time.monotonic() + 30
    while len(eof) < partitions:
        assert time.monotonic() < deadline, f"EOF on {eof} only"
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
            eof.add(m.partition())
            continue
        got.append((m.partition(), m.offset(), m.value()))
    return got


def _program(ck, bs: str, topic: str, txn_id: str) -> list:
    """A classic confluent-kafka transactional program (with a consume-transform-produce step
    and a zombie producer); returns what it observed."""
    out: list = []
    errors: list = []
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn_id, "linger.ms": 5,
                     "error_cb": lambda e: errors.append((e.name(), e.fatal()))})
    try:
        p.commit_transaction(10)
    except ck.KafkaException as e:
        out.append(("commit before init", e.args[0].name(), e.args[0].fatal()))
    p.init_transactions(30)
    for n, commit in ((0, True), (1, False), (2, True)):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"t%d-%d" % (n, i), partition=i % 2)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    try:
        p.begin_transaction()
        p.begin_transaction()
    except ck.KafkaException as e:
        out.append(("begin twice", e.args[0].name(), e.args[0].fatal(), e.args[0].txn_requires_abort()))
    p.abort_transaction(30)

    # consume-transform-produce: the group's offsets go with the transaction
    group = f"{txn_id}-g"
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    tps = [ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING), ck.TopicPartition(topic, 1, ck.OFFSET_BEGINNING)]
    c.assign(tps)
    read = _read_eof(ck, c, 2)
    out.append(("read", sorted(read)))
    positions = c.position([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)])
    out.append(("positions", [(tp.partition, tp.offset) for tp in positions]))
    for commit in (False, True):
        p.begin_transaction()
        for part, _, value in read:
            p.produce(topic, b"copy-" + value, partition=part)
        p.flush(30)  # (else how much of the aborted copy reached the log depends on timing)
        p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
        committed = c.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=10)
        out.append(("committed after " + ("commit" if commit else "abort"),
                    [(tp.partition, tp.offset) for tp in committed]))
    c.close()

    fencer = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    fencer.init_transactions(30)
    try:
        p.begin_transaction()
        p.produce(topic, b"zombie", partition=0)
        p.commit_transaction(30)
        out.append("zombie committed")
    except ck.KafkaException as e:
        out.append(("fenced", e.args[0].name(), e.args[0].fatal()))
    for _ in range(5):
        p.poll(0.2)
    out.append(("error_cb", errors))
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": f"{txn_id}-r", "isolation.level": "read_committed",
                     "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING), ck.TopicPartition(topic, 1, ck.OFFSET_BEGINNING)])
    out.append(("final", sorted(_read_eof(ck, c, 2))))
    c.close()
    return out


def test_transactional_program_same_output_as_confluent_kafka(kafka):
    bs = kafka.bootstrap
    topic_k, topic_c = _topic(bs, 2), _topic(bs, 2)
    ours = _program(kc, bs, topic_k, f"{topic_k}-prog")
    theirs = _program(confluent_kafka, bs, topic_c, f"{topic_c}-prog")
    for a, b in zip(ours, theirs):
        assert a == b
    assert len(ours) == len(theirs)
    values = sorted((p, v) for p, _, v in ours[-1][1])
    first = sorted([(i % 2, b"t%d-%d" % (n, i)) for n in (0, 2) for i in range(3)])
    assert values == sorted(first + [(p, b"copy-" + v) for p, v in first])
    assert ("committed after abort", [(0, -1001), (1, -1001)]) in ours


# --- an abortable error: a record the broker refuses ---------------------------------------------

def _small_topic(bootstrap: str) -> str:
    """A topic whose max.message.bytes refuses a 5,000-byte record (the producer's own limit,
    message.max.bytes, lets it through)."""
    name = f"txn-small-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config={"max.message.bytes": "1000"})]).values():
        f.result(20)
    return name


def _abortable_program(ck, bs: str, topic: str) -> tuple[list, list]:
    """Up to the abort: librdkafka 2.16 then fails the next transaction with
    OUT_OF_ORDER_SEQUENCE_NUMBER now and then (the refused batch's sequence; its epoch bump
    races the next produce), so what follows the abort is checked on kwire alone.

    Gives (the calls' outcomes in order, the delivery reports): librdkafka serves the refused
    record's report before or after commit_transaction raises (its broker thread races the
    application's), so only that it is served once by the end of the abort is compared."""
    out: list = []
    reports: list = []
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": f"{topic}-{ck.__name__}", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"small-1", partition=0)
    p.flush(30)
    p.produce(topic, b"x" * 5000, partition=0, on_delivery=lambda err, msg: reports.append(("report", err.name())))
    try:
        p.commit_transaction(30)
        out.append("committed")
    except ck.KafkaException as e:
        err = e.args[0]
        out.append(("commit", err.name(), err.fatal(), err.retriable(), err.txn_requires_abort()))
    try:
        p.produce(topic, b"after-error", partition=0)
        out.append("produced in a failed transaction")
    except ck.KafkaException as e:
        out.append(("produce", e.args[0].name(), e.args[0].txn_requires_abort()))
    p.abort_transaction(30)
    return out, reports


def test_refused_record_makes_the_transaction_abortable(kafka):
    """MESSAGE_TOO_LARGE inside a transaction: commit raises an abortable error (the record's
    code, txn_requires_abort), abort and a new transaction work -- as with confluent-kafka."""
    bs = kafka.bootstrap
    ours = _abortable_program(kc, bs, _small_topic(bs))
    theirs = _abortable_program(confluent_kafka, bs, _small_topic(bs))
    assert ours == theirs
    assert ours[0] == [("commit", "MSG_SIZE_TOO_LARGE", False, False, True), ("produce", "_STATE", False)]
    assert ours[1] == [("report", "MSG_SIZE_TOO_LARGE")]
    # kwire's own API: the typed error and its cause; after the abort (a new epoch: the refused
    # batch left a gap in the sequence) the next transaction commits
    topic = _small_topic(bs)
    p = _txn_producer(bs, f"{topic}-native", **{"linger.ms": 0})
    try:
        p.begin_transaction()
        p.produce(topic, b"x" * 5000, partition=0)
        with pytest.raises(TransactionAbortRequiredError) as info:
            p.commit_transaction(30)
        assert info.value.cause.code == 10  # MESSAGE_TOO_LARGE
        p.abort_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"ok", partition=0)
        p.commit_transaction(30)
    finally:
        p.close(10)
    assert [v for _, v in _read_kwire(bs, topic, "read_committed", 1)] == [b"ok"]


# --- the coordinator's retriable answers (librdkafka's mock cluster, errors injected) -----------

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
CONCURRENT_TRANSACTIONS = 51


def test_coordinator_retriable_errors_and_a_moved_coordinator(unique_topic):
    """Each transactional request answered with CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR is asked again
    (after FindCoordinator when the coordinator moved), and the transaction commits; the
    trace shows the retries and that EndTxn went to the new coordinator."""
    from .mock_control import ControlledMockCluster

    with ControlledMockCluster(3) as mc:
        txn_id = f"{unique_topic}-txn"
        group = f"{unique_topic}-g"
        events: list = []
        mc.set_transaction_coordinator(txn_id, 1)
        mc.push_request_errors(INIT_PRODUCER_ID, COORDINATOR_LOAD_IN_PROGRESS, 1)
        mc.push_request_errors(INIT_PRODUCER_ID, CONCURRENT_TRANSACTIONS, 2)
        p = Producer({"bootstrap.servers": mc.bootstrap, "transactional.id": txn_id, "linger.ms": 0,
                      "retry.backoff.ms": 50}, tracer=events.append)
        try:
            p.init_transactions(30)
            p.begin_transaction()
            mc.push_request_errors(ADD_PARTITIONS, CONCURRENT_TRANSACTIONS, 2)
            delivered = []
            for i in range(4):
                p.produce(unique_topic, b"v%d" % i, partition=i % 2,
                          on_delivery=lambda err, m: delivered.append((err, m.value())))
            assert p.flush(30) == 0
            assert sorted(v for e, v in delivered if e is None) == [b"v0", b"v1", b"v2", b"v3"]
            mc.push_request_errors(ADD_OFFSETS, COORDINATOR_NOT_AVAILABLE, 1)
            mc.push_request_errors(TXN_OFFSET_COMMIT, NOT_COORDINATOR, 1)
            p.send_offsets_to_transaction({(unique_topic, 0): 5}, group, 30)
            mc.set_transaction_coordinator(txn_id, 2)  # moves; the old one says NOT_COORDINATOR
            mc.push_request_errors(END_TXN, NOT_COORDINATOR, 1)
            p.commit_transaction(30)
        finally:
            p.close(5)

    def answers(api):
        return [e["body"].get("error_code") for e in events if e["api"] == api and e["direction"] == "recv"]

    assert answers("InitProducerId") == [COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS,
                                         CONCURRENT_TRANSACTIONS, 0]
    assert answers("AddOffsetsToTxn") == [COORDINATOR_NOT_AVAILABLE, 0]
    assert answers("EndTxn") == [NOT_COORDINATOR, 0]
    end_nodes = [e["node_id"] for e in events if e["api"] == "EndTxn" and e["direction"] == "send"]
    assert end_nodes[-1] == 2 and end_nodes[0] != 2
    adds = [e["body"] for e in events if e["api"] == "AddPartitionsToTxn" and e["direction"] == "recv"]
    codes = [p["partition_error_code"] for b in adds for t in b["results_by_topic_v3_and_below"]
             for p in t["results_by_partition"]]
    assert codes.count(CONCURRENT_TRANSACTIONS) >= 2 and codes[-1] == 0
    commits = [e["body"] for e in events if e["api"] == "TxnOffsetCommit" and e["direction"] == "recv"]
    assert [p["error_code"] for b in commits for t in b["topics"] for p in t["partitions"]] == [NOT_COORDINATOR, 0]


PRODUCE, UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER = 0, 59, 45


def test_idempotent_unknown_producer_id_and_out_of_order(unique_topic):
    """librdkafka's mock cluster answers one Produce with UNKNOWN_PRODUCER_ID: the producer
    takes a new id and sends the batch again (delivered); then one with
    OUT_OF_ORDER_SEQUENCE_NUMBER: that batch fails with the error, the producer takes a new id,
    and the records after it are delivered (Java's KIP-360 epoch bump, librdkafka's drain)."""
    from kwire.errors import OutOfOrderSequenceNumberError

    from .mock_control import ControlledMockCluster

    with ControlledMockCluster(3) as mc:
        events: list = []
        p = Producer({"bootstrap.servers": mc.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                      "retry.backoff.ms": 20}, tracer=events.append)
        reports: list = []

        def report(err, msg):
            reports.append((msg.value(), None if err is None else type(err)))

        try:
            p.produce(unique_topic, b"warm", partition=0, on_delivery=report)
            assert p.flush(20) == 0
            mc.push_request_errors(PRODUCE, UNKNOWN_PRODUCER_ID, 1)
            p.produce(unique_topic, b"after-unknown-id", partition=0, on_delivery=report)
            assert p.flush(20) == 0
            mc.push_request_errors(PRODUCE, OUT_OF_ORDER_SEQUENCE_NUMBER, 1)
            p.produce(unique_topic, b"out-of-order", partition=0, on_delivery=report)
            assert p.flush(20) == 0
            p.produce(unique_topic, b"last", partition=0, on_delivery=report)
            assert p.flush(20) == 0
            assert p.fatal_error is None
        finally:
            p.close(5)
    assert reports == [(b"warm", None), (b"after-unknown-id", None),
                       (b"out-of-order", OutOfOrderSequenceNumberError), (b"last", None)]
    pids = [e["body"]["producer_id"] for e in events if e["api"] == "InitProducerId" and e["direction"] == "recv"]
    assert len(pids) == 3 and len(set(pids)) == 3  # the first, after UNKNOWN_PRODUCER_ID, after OUT_OF_ORDER
    # every batch carried the producer id of its time, sequences from 0 for each new id
    produced = [e for e in events if e["api"] == "Produce" and e["direction"] == "send"]
    assert len(produced) == 5  # warm, the refused one and its retry, out-of-order, last
