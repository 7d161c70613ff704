"""Transactions and read_committed on Apache Kafka: what only a real broker can show.

confluent-kafka's transactional producers commit and abort interleaved transactions across
partitions, a non-transactional producer writes between them on the same partitions, and one
transaction is left open, so the last stable offset (LSO) of two partitions stays below their
high watermark.  kwire's Consumer, ``kafka_rdd``, ``kafka_arrow_rdd``, ``read_kafka`` (each
reader) and the "kwire" Data Source must then return exactly the committed records, stop at the
LSO under read_committed, return every data record (never a control record) under
read_uncommitted, and move their positions past control records and aborted ranges.

The expected records come from confluent-kafka's delivery reports (partition, offset, value)
and each transaction's outcome; the LSO and high watermark are checked against confluent-kafka's
own ListOffsets (``get_watermark_offsets`` per isolation level).  The Consumer tests run on
Kafka 4.3 and 3.9, the Spark ones on 4.3.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import kwire.spark as ks
from kwire import TopicPartition
from kwire.consumer import OFFSET_BEGINNING, Consumer
from kwire.errors import KafkaTimeoutError
from kwire.spark.reader import ReadSettings, read_range_rows

PARTITIONS = 3
COMMITTED = ("plain", "committed")
TXN_TIMEOUT_MS = 900_000  # the broker's transaction.max.timeout.ms: the open one must outlive the module


# --- writing -------------------------------------------------------------------------------------

@dataclass
class Written:
    """A topic written by several producers: every data record with its fate, and the ends of
    each partition (``lso``: last stable offset, ``hw``: high watermark)."""

    bootstrap: str
    topic: str
    partitions: int
    records: list = field(default_factory=list)  # [(partition, offset, value, fate)]
    lso: dict = field(default_factory=dict)
    hw: dict = field(default_factory=dict)

    def expected(self, committed_only: bool, start: dict | None = None) -> set:
        """(partition, offset, value) of what a reader from ``start`` (default 0) must return."""
        start = start or {}
        end = self.lso if committed_only else self.hw
        return {(p, o, v) for p, o, v, fate in self.records
                if (fate in COMMITTED or not committed_only) and start.get(p, 0) <= o < end[p]}


class Writer:
    """Producers writing one topic; records are remembered with their transaction's fate once
    it is known (delivery reports give the offsets)."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap = bootstrap
        self.topic = topic
        self.records: list = []
        self._open: dict = {}  # producer name -> [(partition, offset, value)] of its transaction
        self.producers: dict = {}

    def producer(self, name: str, transactional: bool = True, **config):
        conf = {"bootstrap.servers": self.bootstrap, "linger.ms": 5, **config}
        if transactional:
            conf.update({"transactional.id": f"{self.topic}-{name}", "transaction.timeout.ms": TXN_TIMEOUT_MS})
        p = confluent_kafka.Producer(conf)
        if transactional:
            p.init_transactions(30)
        self.producers[name] = p
        return p

    def begin(self, name: str) -> None:
        self.producers[name].begin_transaction()
        self._open[name] = []

    def send(self, name: str, partitions, n: int, label: str) -> None:
        """``n`` records to each of ``partitions``, flushed (so they are in the log, in order)."""
        p = self.producers[name]
        sink = self._open[name] if name in self._open else None
        delivered = []

        def report(err, msg):
            assert err is None, err
            delivered.append((msg.partition(), msg.offset(), msg.value()))

        for part in partitions:
            for i in range(n):
                p.produce(self.topic, value=b"%s-p%d-%d" % (label.encode(), part, i), partition=part,
                          on_delivery=report)
        assert p.flush(30) == 0
        assert len(delivered) == n * len(partitions)
        if sink is None:
            self.records.extend((*r, "plain") for r in delivered)
        else:
            sink.extend(delivered)

    def end(self, name: str, commit: bool) -> None:
        p = self.producers[name]
        p.commit_transaction(30) if commit else p.abort_transaction(30)
        fate = "committed" if commit else "aborted"
        self.records.extend((*r, fate) for r in self._open.pop(name))

    def leave_open(self, name: str) -> None:
        self.records.extend((*r, "pending") for r in self._open[name])


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(20)


def watermarks(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict:
    """confluent-kafka's answer for the end of each partition: the high watermark
    (read_uncommitted) or the last stable offset (read_committed)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe",
                                  "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=20)[1]
                for p in range(partitions)}
    finally:
        c.close()


def write_interleaved(bootstrap: str, topic: str):
    """The shared topic (3 partitions).  In log order per partition:

    ``n0`` plain; ``a1`` (A, aborted, all partitions) interleaved with ``b1`` (B, committed,
    p0/p1) and ``n1`` plain; ``a2`` (A, committed, p0/p2) interleaved with ``b2`` (B, aborted,
    all); ``n2`` plain; ``a3`` (A, committed, p1 alone: a marker right after it); ``b3`` (B,
    aborted, p2 alone: p2 ends with an aborted range and its marker); ``c`` (C, left open,
    p0/p1: their LSO stops there) and ``n3`` plain after it on p0/p1.
    B compresses (lz4), so aborted ranges include compressed batches.
    """
    create_topic(bootstrap, topic, PARTITIONS)
    w = Writer(bootstrap, topic)
    w.producer("A")
    w.producer("B", **{"compression.type": "lz4"})
    w.producer("C")
    w.producer("N", transactional=False)
    all_p = range(PARTITIONS)
    w.send("N", all_p, 3, "n0")
    w.begin("A")
    w.send("A", all_p, 4, "a1")
    w.begin("B")
    w.send("B", [0, 1], 3, "b1")
    w.send("N", all_p, 2, "n1")
    w.send("A", all_p, 2, "a1x")
    w.end("A", commit=False)
    w.send("B", [0], 2, "b1x")
    w.end("B", commit=True)
    w.begin("A")
    w.send("A", [0, 2], 5, "a2")
    w.begin("B")
    w.send("B", all_p, 3, "b2")
    w.end("A", commit=True)
    w.end("B", commit=False)
    w.send("N", all_p, 2, "n2")
    w.begin("A")
    w.send("A", [1], 3, "a3")
    w.end("A", commit=True)
    w.begin("B")
    w.send("B", [2], 4, "b3")
    w.end("B", commit=False)
    w.begin("C")
    w.send("C", [0, 1], 3, "c")
    w.leave_open("C")
    w.send("N", [0, 1], 2, "n3")

    data = Written(bootstrap, topic, PARTITIONS, sorted(w.records))
    data.hw = watermarks(bootstrap, topic, PARTITIONS, "read_uncommitted")
    pending = {}
    for p, o, _, fate in data.records:
        if fate == "pending":
            pending[p] = min(o, pending.get(p, o))
    data.lso = {p: pending.get(p, data.hw[p]) for p in range(PARTITIONS)}
    # what the broker says, and what the data must look like for the tests to mean anything
    assert watermarks(bootstrap, topic, PARTITIONS, "read_committed") == data.lso
    assert data.lso[0] < data.hw[0] and data.lso[1] < data.hw[1] and data.lso[2] == data.hw[2]
    last = {p: max(o for q, o, _, _ in data.records if q == p) for p in range(PARTITIONS)}
    assert data.hw[2] == last[2] + 2  # p2 ends with b3's ABORT marker
    assert data.expected(True) < data.expected(False)
    return data, w


def close_open(w: Writer) -> None:
    w.producers["C"].abort_transaction(30)


@pytest.fixture(scope="module")
def txn43(kafka):
    data, w = write_interleaved(kafka.bootstrap, f"t-txn43-{time.time_ns()}")
    yield data
    close_open(w)


@pytest.fixture(scope="module")
def txn39(kafka39):
    data, w = write_interleaved(kafka39.bootstrap, f"t-txn39-{time.time_ns()}")
    yield data
    close_open(w)


@pytest.fixture(params=["txn43", "txn39"], ids=["kafka", "kafka39"])
def txn(request):
    return request.getfixturevalue(request.param)


# --- kwire's Consumer ------------------------------------------------------------------------------

def consumer(bootstrap: str, isolation: str, **cfg) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                     "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, **cfg})


def positions(c: Consumer, topic: str, partitions) -> dict:
    return {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in partitions])}


def read_until(c: Consumer, topic: str, ends: dict, timeout_s: float = 30.0, settle_s: float = 1.0) -> list:
    """Consume until every partition's position reaches ``ends``, then ``settle_s`` more (so a
    record past the end would show); the records as (partition, offset, value)."""
    got = []
    deadline = time.monotonic() + timeout_s
    settled = None
    while True:
        got.extend((r.partition, r.offset, r.value) for r in c.consume(500, timeout=0.1))
        now = time.monotonic()
        if settled is None and positions(c, topic, ends) == ends:
            settled = now + settle_s
        if settled is not None and now >= settled:
            return got
        if now >= deadline:
            raise AssertionError(f"positions {positions(c, topic, ends)} never reached {ends}; "
                                 f"{len(got)} records read")


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_consumer_returns_exactly_the_committed_records(txn, isolation):
    committed = isolation == "read_committed"
    ends = txn.lso if committed else txn.hw
    with consumer(txn.bootstrap, isolation) as c:
        c.assign([TopicPartition(txn.topic, p, OFFSET_BEGINNING) for p in range(txn.partitions)])
        got = read_until(c, txn.topic, ends)
        # each record once, and the position stays at the end: past the markers at the end of
        # p1 (a3's COMMIT) and p2 (b3's ABORT), never past the open transaction on p0/p1
        assert len(got) == len(set(got))
        assert set(got) == txn.expected(committed)
        assert positions(c, txn.topic, ends) == ends


def test_consumer_starting_inside_transactions(txn):
    """Positions inside an aborted transaction, a committed one and on a marker: read_committed
    still drops the rest of the aborted one (the broker lists it although it began earlier)."""
    for fate in ("aborted", "committed"):
        for p in range(txn.partitions):
            offsets = sorted(o for q, o, _, f in txn.records if q == p and f == fate)
            for start in (offsets[1], offsets[-1] + 1):  # mid-transaction; just after a batch
                with consumer(txn.bootstrap, "read_committed") as c:
                    c.assign([TopicPartition(txn.topic, p, start)])
                    got = read_until(c, txn.topic, {p: txn.lso[p]}, settle_s=0.3)
                assert set(got) == {r for r in txn.expected(True, {p: start}) if r[0] == p}, (fate, p, start)


@pytest.mark.parametrize("peer_name", ["kafka", "kafka39"])
def test_consumer_reaches_the_end_of_an_aborted_tail(request, peer_name):
    """A partition that holds nothing but aborted transactions, then a committed one, then an
    aborted tail again: the position moves over each aborted range and its marker (no record
    to return), and a record written afterwards arrives."""
    bootstrap = request.getfixturevalue(peer_name).bootstrap
    topic = f"t-txn-tail-{peer_name}-{time.time_ns()}"
    create_topic(bootstrap, topic, 1)
    w = Writer(bootstrap, topic)
    w.producer("A")
    w.producer("N", transactional=False)
    for n in (5, 3):  # offsets 0-4 + marker 5, 6-8 + marker 9
        w.begin("A")
        w.send("A", [0], n, "x")
        w.end("A", commit=False)
    with consumer(bootstrap, "read_committed") as committed, \
            consumer(bootstrap, "read_uncommitted") as uncommitted:
        for c in (committed, uncommitted):
            c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert read_until(committed, topic, {0: 10}) == []
        assert {r[1] for r in read_until(uncommitted, topic, {0: 10})} == {0, 1, 2, 3, 4, 6, 7, 8}

        w.begin("A")
        w.send("A", [0], 2, "y")  # 10, 11 + marker 12
        w.end("A", commit=True)
        assert [r[1] for r in read_until(committed, topic, {0: 13})] == [10, 11]
        w.begin("A")
        w.send("A", [0], 3, "z")  # 13-15 + marker 16
        w.end("A", commit=False)
        assert read_until(committed, topic, {0: 17}) == []
        w.send("N", [0], 1, "n")  # 17
        assert read_until(committed, topic, {0: 18}) == [(0, 17, b"n-p0-0")]
        assert [r[1] for r in read_until(uncommitted, topic, {0: 18})] == [10, 11, 13, 14, 15, 17]


# --- Spark ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def registered(spark):
    ks.register(spark)
    return spark


def rows_of(df) -> list:
    return [(r.partition, r.offset, r.value) for r in df.select("partition", "offset", "value").collect()]


def source_options(data: Written, isolation: str) -> dict:
    return {"kafka.bootstrap.servers": data.bootstrap, "subscribe": data.topic,
            "kafka.isolation.level": isolation}


def check_rows(rows: list, data: Written, committed: bool) -> None:
    assert len(rows) == len(set(rows))
    assert set(rows) == data.expected(committed)


ISOLATIONS = pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])


@ISOLATIONS
@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka(spark, txn43, isolation, reader):
    df = ks.read_kafka(spark, reader=reader, **source_options(txn43, isolation))
    check_rows(rows_of(df), txn43, isolation == "read_committed")


@ISOLATIONS
def test_data_source(registered, txn43, isolation):
    df = registered.read.format("kwire").options(**source_options(txn43, isolation)).load()
    check_rows(rows_of(df), txn43, isolation == "read_committed")
    # split into small ranges: each one starts and ends inside transactions and markers
    df = registered.read.format("kwire").options(maxRecordsPerPartition=4,
                                                 **source_options(txn43, isolation)).load()
    assert df.rdd.getNumPartitions() > 3 * txn43.partitions
    check_rows(rows_of(df), txn43, isolation == "read_committed")


def rdd_ranges(data: Written, committed: bool) -> list:
    ends = data.lso if committed else data.hw
    return [(data.topic, p, 0, ends[p]) for p in range(data.partitions)]


@ISOLATIONS
def test_kafka_rdd(spark, txn43, isolation):
    committed = isolation == "read_committed"
    config = {"bootstrap.servers": txn43.bootstrap, "isolation.level": isolation}
    rdd = ks.kafka_rdd(spark.sparkContext, config, rdd_ranges(txn43, committed))
    check_rows([(r.partition, r.offset, r.value) for r in rdd.collect()], txn43, committed)


@ISOLATIONS
def test_kafka_arrow_rdd(spark, txn43, isolation):
    committed = isolation == "read_committed"
    config = {"bootstrap.servers": txn43.bootstrap, "isolation.level": isolation}
    rdd = ks.kafka_arrow_rdd(spark.sparkContext, config, rdd_ranges(txn43, committed), num_partitions=2)
    rows = [(p, o, v) for b in rdd.collect()
            for p, o, v in zip(*(b.column(name).to_pylist() for name in ("partition", "offset", "value")))]
    check_rows(rows, txn43, committed)


def test_a_range_past_the_lso_waits_for_it_then_times_out(txn43):
    """A range planned past the LSO under read_committed (by hand: read_kafka plans up to the
    LSO) cannot be read while the transaction is open: the executor's reader waits up to
    pollTimeoutMs and says why, instead of returning the open transaction or hanging."""
    settings = ReadSettings({"bootstrap.servers": txn43.bootstrap, "isolation.level": "read_committed",
                             "fetch.wait.max.ms": 100}, poll_timeout_ms=1500)
    rows = []
    t0 = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="last stable offset %d" % txn43.lso[0]):
        rows.extend(read_range_rows(settings, (txn43.topic, 0, 0, txn43.hw[0])))
    assert time.monotonic() - t0 < 30
    assert {(r.partition, r.offset, r.value) for r in rows} == {r for r in txn43.expected(True) if r[0] == 0}


def test_kafka_rdd_ranges_from_every_offset(spark, txn43):
    """A range from every offset below the LSO to the LSO, under read_committed: ranges that
    start inside aborted and committed transactions and on markers each return exactly the
    committed records from there on."""
    starts = [(p, s) for p in range(txn43.partitions) for s in range(txn43.lso[p])]
    ranges = [(txn43.topic, p, s, txn43.lso[p]) for p, s in starts]
    config = {"bootstrap.servers": txn43.bootstrap, "isolation.level": "read_committed"}
    rdd = ks.kafka_rdd(spark.sparkContext, config, ranges, num_partitions=2)
    got = Counter((r.partition, r.offset, r.value) for r in rdd.collect())
    expected = Counter()
    for p, s in starts:
        expected.update(r for r in txn43.expected(True, {p: s}) if r[0] == p)
    assert got == expected
