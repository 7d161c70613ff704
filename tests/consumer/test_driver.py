"""The consumer's real driver (kwire.consumer.driver.Driver) stepped on a fake clock against the
in-memory cluster (tests/consumer/fakes.py): the production loop -- commands, the machines'
polls, responses, decoding of real record batches, events for the application -- with no
thread and no broker.  The application's side is played by the test through the Channel.
"""
from __future__ import annotations

import pytest

from kwire.config import parse_config
from kwire.consumer.channel import (
    AckRevoke,
    Assign,
    Channel,
    Close,
    Commit,
    Future,
    GroupEvent,
    Pause,
    Resume,
    Seek,
    SeekDone,
    Stop,
    Subscribe,
    Unassign,
    moves_position,
)
from kwire.consumer.driver import Driver
from kwire.consumer.fetch_buffer import HandBack
from kwire.consumer.fetcher import FetchedChunk
from kwire.consumer.types import (
    OFFSET_INVALID,
    AssignPartitions,
    CommitResult,
    OffsetAndMetadata,
    RevokePartitions,
)
from kwire.errors import KwireError

from .fakes import Clock, FakeCluster, FakeNetwork


class Harness:
    """A driver, its channel and the fake network, and the application's part done by hand."""

    def __init__(self, cluster: FakeCluster, **conf):
        self.cluster = cluster
        self.clock = Clock()
        self.net = FakeNetwork(cluster, self.clock)
        cfg = parse_config({"bootstrap.servers": "fake:9001", "group.id": "g",
                            "auto.offset.reset": "earliest", **conf}, role="consumer")
        self.ch = Channel()
        self.drv = Driver(cfg, self.ch, network=self.net, clock=lambda: self.clock.now_ms)
        self.failed: list = []  # (tp, fence, resume offset) of damaged chunks
        self.decoder = self.drv._fetcher.make_decoder(HandBack(self.ch.released, lambda n: None),
                                                      lambda *a: self.failed.append(a))
        self.stopped = False
        self.events: list = []
        self.records: dict = {}  # tp -> [(offset, value)]
        self.fences: dict = {}   # tp -> lowest acceptable fence (as the Consumer keeps it)

    def turn(self, ms: int = 10) -> None:
        """One loop of Driver.run: step, the network, the responses; the application polled."""
        self.ch.last_poll_ms = self.clock.now_ms
        if self.drv.step(self.clock.now_ms) is None:
            self.stopped = True
            return
        done = self.net.poll(0)
        if done:
            self.drv.on_done(done)
        self.clock.advance(ms)

    def take(self, chunks: bool = True) -> None:
        """What the application does with the queues: group events first, then (unless told
        not to: an application busy elsewhere) the chunks, releasing their bytes."""
        ch = self.ch
        while ch.urgent:
            ev = ch.urgent.popleft()
            self.events.append(ev)
            if type(ev) is GroupEvent:
                if isinstance(ev.action, AssignPartitions):
                    self.fences.update(ev.fences)
                elif isinstance(ev.action, RevokePartitions):
                    for tp in ev.action.partitions:
                        self.fences.pop(tp, None)
                    ch.cmds.append(AckRevoke(ev.action.ack_id, {}))
        while ch.q and chunks:
            item = ch.q.popleft()
            if type(item) is FetchedChunk:
                # a raw chunk: decoded here, by the application, with the decoder the Consumer
                # uses; handed back to the driver (HandBack) once done
                if item.fence >= self.fences.get(item.tp, 1 << 62):
                    while (piece := self.decoder.decode_piece(item, None)) is not None:
                        self.records.setdefault(item.tp, []).extend(
                            (r.offset, r.value) for r in piece.records)
                self.decoder.buffer.finish(item)
            else:
                self.events.append(item)
                if type(item) is SeekDone:
                    self.fences[item.tp] = item.fence

    def run_until(self, cond, max_turns: int = 3000, chunks: bool = True) -> None:
        for _ in range(max_turns):
            if cond():
                return
            self.turn()
            self.take(chunks)
        raise AssertionError("condition not met")

    def call(self, make, *args):
        fut = Future()
        self.ch.cmds.append(make(*args, fut))
        self.run_until(lambda: fut._event.is_set())
        return fut


@pytest.fixture
def cluster():
    c = FakeCluster(real_records=True)
    c.create_topic("t", 2)
    return c


def values(n: int, tag: str = "v") -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


def test_subscribe_join_fetch_commit_close(cluster):
    for p in range(2):
        for chunk in range(3):
            cluster.append(("t", p), values(5, f"p{p}c{chunk}-"))
    h = Harness(cluster)
    h.call(Subscribe, ["t"])
    h.run_until(lambda: sum(len(v) for v in h.records.values()) == 30)
    assigned = [ev for ev in h.events if type(ev) is GroupEvent]
    assert isinstance(assigned[0].action, AssignPartitions)
    assert sorted(assigned[0].action.partitions) == [("t", 0), ("t", 1)]
    for p in range(2):
        got = h.records[("t", p)]
        assert [o for o, _ in got] == list(range(15))
        assert [v for _, v in got] == [f"p{p}c{c}-{i}".encode() for c in range(3) for i in range(5)]
    # a commit goes to the coordinator, and its result to the future
    fut = h.call(Commit, {("t", 0): OffsetAndMetadata(15), ("t", 1): OffsetAndMetadata(7)})
    assert isinstance(fut.value, CommitResult) and fut.value.error is None
    group = cluster.groups["g"]
    assert {tp: o[0] for tp, o in group.offsets.items()} == {("t", 0): 15, ("t", 1): 7}
    # close: LeaveGroup, then the loop ends
    close = Future()
    h.ch.cmds.append(Close({}, close))
    h.run_until(lambda: h.stopped)
    assert close is h.drv._close_future
    assert [a for _, _, a in h.net.sent].count("LeaveGroup") == 1


def test_stop_ends_the_loop_at_once(cluster):
    h = Harness(cluster)
    h.ch.cmds.append(Stop())
    h.turn()
    assert h.stopped and not h.net.sent


def test_a_failing_command_answers_its_future(cluster):
    h = Harness(cluster)
    h.call(Subscribe, ["t"])
    fut = h.call(Unassign, None)
    with pytest.raises(KwireError, match="unassign"):
        fut.wait(0)


def test_raw_chunks_wait_for_the_application_within_the_budget(cluster):
    for _ in range(40):
        cluster.append(("t", 0), [b"x" * 1000] * 50)
    h = Harness(cluster, **{"queued.max.messages.kbytes": 1024})
    buffer = h.drv._fetcher.buffer
    h.call(Subscribe, ["t"])
    h.run_until(lambda: any(type(i) is FetchedChunk for i in h.ch.q), chunks=False)
    # the application takes nothing: the driver stops fetching once the budget is used, and
    # hands the application raw chunks only (it decodes nothing itself)
    for _ in range(5):
        h.turn()
    fetches = sum(1 for _, _, api in h.net.sent if api == "Fetch")
    for _ in range(50):
        h.turn()
    queued = [i for i in h.ch.q if type(i) is FetchedChunk]
    assert queued and all(c.records is None for c in queued)
    assert h.drv._fetcher.starved and buffer.full_bytes() >= buffer.budget_bytes
    assert sum(1 for _, _, api in h.net.sent if api == "Fetch") == fetches, "fetched on a full budget"
    # once the application decodes and hands the chunks back, the rest arrives, in order
    h.run_until(lambda: len(h.records.get(("t", 0), ())) == 2000)
    assert [o for o, _ in h.records[("t", 0)]] == list(range(2000))
    h.turn()  # (the driver takes the handed-back chunks' bytes out of the budget)
    assert buffer.buffered_total == 0 and not h.ch.released


def test_seek_and_pause_move_the_fence(cluster):
    cluster.append(("t", 0), values(10))
    cluster.append(("t", 1), values(10))
    h = Harness(cluster)
    h.call(Subscribe, ["t"])
    h.run_until(lambda: len(h.records.get(("t", 0), ())) == 10)
    before = h.fences[("t", 0)]
    h.ch.cmds.append(Seek(("t", 0), 4, None))
    h.run_until(lambda: h.fences[("t", 0)] > before)
    h.records.clear()
    cluster.append(("t", 0), values(2, "late"))
    h.run_until(lambda: len(h.records.get(("t", 0), ())) == 8)
    assert [o for o, _ in h.records[("t", 0)]] == list(range(4, 12))
    # pause at the application's position (10): the fence moves again, nothing more arrives
    # until resume, and then the fetch goes on from that position
    h.ch.cmds.append(Pause([(("t", 1), (10, None, h.fences[("t", 1)]))]))
    h.run_until(lambda: any(type(e) is SeekDone and e.tp == ("t", 1) for e in h.events))
    h.records.clear()
    cluster.append(("t", 1), values(3, "after-pause"))
    for _ in range(100):
        h.turn()
        h.take()
    assert ("t", 1) not in h.records
    h.ch.cmds.append(Resume([("t", 1)]))
    h.run_until(lambda: len(h.records.get(("t", 1), ())) >= 3, max_turns=300)
    assert [v for _, v in h.records[("t", 1)]] == values(3, "after-pause"), h.records


def test_offsets_given_in_on_assign_drop_what_was_fetched_before(cluster):
    """assign() inside on_assign (subscribed: the group chose the partitions) says where they
    start.  When the driver had reset them already (no committed offset) and fetched, those
    records are of a position that no longer holds: the driver answers each partition it moved
    with a SeekDone, as for seek(), and the application -- which raised the partition's fence
    when it asked (Consumer.assign) -- drops them.  A partition given no offset keeps its own."""
    for p in range(2):
        cluster.append(("t", p), values(10, f"p{p}-"))
    h = Harness(cluster)
    h.call(Subscribe, ["t"])
    # on_assign has not run yet (the application is busy): the driver resets both partitions
    # to the earliest offset and fetches 0-9 of each
    h.run_until(lambda: sum(type(i) is FetchedChunk for i in h.ch.q) == 2, chunks=False)
    parts = [("t", 0, 5, None), ("t", 1, OFFSET_INVALID, None)]
    for t, p, offset, _ in parts:  # (as Consumer.assign does before it posts the command)
        if moves_position(offset):
            h.fences[(t, p)] = 1 << 62
    h.call(Assign, parts, False)
    h.run_until(lambda: len(h.records.get(("t", 0), ())) >= 5 and len(h.records.get(("t", 1), ())) >= 10)
    for _ in range(20):
        h.turn()
        h.take()
    assert [o for o, _ in h.records[("t", 0)]] == list(range(5, 10))
    assert [o for o, _ in h.records[("t", 1)]] == list(range(10))
    assert [e.tp for e in h.events if type(e) is SeekDone] == [("t", 0)]


def test_read_committed_drops_an_aborted_transaction_from_real_batches(cluster):
    tp = ("t", 0)
    cluster.append(tp, values(3, "plain"))
    aborted = cluster.append(tp, values(4, "aborted"), producer_id=7, transactional=True)
    cluster.append_control(tp, 7, abort=True)
    cluster.append(tp, values(2, "committed"), producer_id=8, transactional=True)
    cluster.append_control(tp, 8, abort=False)
    cluster.append(tp, values(1, "tail"))
    cluster.aborted = {tp: [{"producer_id": 7, "first_offset": aborted.base_offset}]}
    h = Harness(cluster, **{"isolation.level": "read_committed"})
    h.call(Subscribe, ["t"])
    end = cluster.end_offset(tp)
    h.run_until(lambda: h.drv._subs.get(tp) is not None and h.drv._subs.get(tp).position is not None
                and h.drv._subs.get(tp).position.offset == end and not h.ch.q)
    h.take()
    assert [v for _, v in h.records[tp]] == values(3, "plain") + values(2, "committed") + values(1, "tail")


class _SendsToAnUnknownCoordinator:
    """A machine whose poll asks for the group coordinator before anyone found it, and says
    "nothing due for 5 s" -- what a poll result looks like just before the send fails."""

    def __init__(self, now_ms: int):
        self.now_ms, self.answers = now_ms, []

    def poll(self, now_ms):
        from kwire.consumer.types import COORDINATOR, PollResult, Request

        if self.answers:
            return PollResult([], None)
        return PollResult([Request(COORDINATOR, "OffsetFetch", lambda v: {}, owner=self)], now_ms + 5000)

    def on_response(self, request, response, now_ms):
        self.answers.append(response)

    def drain_actions(self):
        return []


def test_a_send_that_fails_at_once_makes_the_driver_poll_again_before_waiting(cluster):
    """The driver waits on the deadlines of each machine's last poll; a request refused before
    it leaves (no coordinator known) changes its machine after that poll, so the driver must
    poll again at once instead of sleeping on the stale deadline."""
    from kwire.errors import KafkaConnectionError

    h = Harness(cluster)
    stub = _SendsToAnUnknownCoordinator(h.clock.now_ms)
    h.drv._machines = (*h.drv._machines, stub)
    assert h.drv._coord.coordinator_id is None
    assert h.drv.step(h.clock.now_ms) == 0
    assert len(stub.answers) == 1 and isinstance(stub.answers[0], KafkaConnectionError)
    # polled again, nothing changed after it: the driver may sleep now
    assert h.drv.step(h.clock.now_ms) > 0
