"""Leaving the group (kwire.consumer.leaving) without I/O: the order of a goodbye -- commits
first, a coordinator to say it to, one goodbye at a time, its answer ends it -- and the goodbye
owed after max.poll.interval.ms, sent once.  The machine alone, then inside a KIP-848 member
driven by a fake clock (the answers are hand-written, as in test_member_machine.py)."""
from __future__ import annotations

from kwire.consumer.leaving import LeaveStep, Leaving
from kwire.consumer.member_state import MemberState
from kwire.consumer.types import ErrorAction
from kwire.errors import MaxPollIntervalExceededError

from .test_member_machine import T1, joined, member


def step(lv, *, goodbye=True, known=True, done=True):
    return lv.step(goodbye=goodbye, coordinator_known=known, commits_done=done)


def test_the_goodbye_waits_for_commits_and_the_coordinator_and_goes_once():
    lv = Leaving()
    lv.start(close=True)
    assert lv.requested and lv.closing
    assert step(lv, done=False) is LeaveStep.WAIT
    assert step(lv, known=False) is LeaveStep.WAIT
    assert step(lv) is LeaveStep.SEND
    assert step(lv) is LeaveStep.WAIT  # in flight: not twice
    assert not lv.due(coordinator_known=True, commits_done=True, member_id="m")
    assert lv.answered(fire_and_forget=False)
    assert step(lv, goodbye=False) is LeaveStep.FINISH
    assert lv.finished() == (MemberState.CLOSED, False)


def test_without_a_goodbye_owed_leaving_finishes_without_a_coordinator():
    lv = Leaving()
    lv.start(close=False)
    assert step(lv, goodbye=False, known=False) is LeaveStep.FINISH
    assert lv.finished() == (MemberState.UNJOINED, True)  # unsubscribe() drops the subscription
    lv.resubscribed()
    assert not lv.requested and lv.finished() == (MemberState.UNJOINED, False)


def test_close_after_unsubscribe_still_closes():
    lv = Leaving()
    lv.start(close=False)
    lv.start(close=True)
    assert lv.finished() == (MemberState.CLOSED, False)
    lv.start(close=False)  # (an unsubscribe after close does not undo it)
    assert lv.closing and lv.finished() == (MemberState.CLOSED, False)


def test_a_fire_and_forget_answer_does_not_finish_a_leave_in_flight():
    lv = Leaving()
    lv.start(close=True)
    assert step(lv) is LeaveStep.SEND
    assert not lv.answered(fire_and_forget=True)
    assert step(lv) is LeaveStep.WAIT


def test_the_owed_goodbye_waits_for_the_coordinator_and_is_taken_once():
    lv = Leaving()
    lv.owe("m-1", None)
    assert not lv.requested
    assert lv.take_owed(coordinator_known=False) is None
    assert lv.take_owed(coordinator_known=True) == ("m-1", None)
    assert lv.take_owed(coordinator_known=True) is None


def test_a_member_past_the_poll_limit_says_goodbye_once_and_rejoins_when_polled():
    m = member()
    m.poll_interval.max_poll_interval_ms = 10_000
    joined(m, {T1: [0, 1]})
    reqs = m.poll(10_001).requests
    (bye,) = [r for r in reqs if r.api == "ConsumerGroupHeartbeat"]
    assert bye.body(1)["member_epoch"] == -1 and bye.context.extra["fire_and_forget"]
    errors = [a for a in m.drain_actions() if isinstance(a, ErrorAction)]
    assert [type(a.error) for a in errors] == [MaxPollIntervalExceededError]
    assert m.subs.assigned() == [] and m.state is MemberState.UNJOINED
    m.on_response(bye, {"error_code": 0, "member_epoch": -1, "member_id": m.member_id,
                        "heartbeat_interval_ms": 0, "assignment": None}, 10_002)
    assert m.state is MemberState.UNJOINED  # (its answer ends nothing)
    assert not [r for r in m.poll(10_003).requests if r.api == "ConsumerGroupHeartbeat"]
    m.on_app_poll(10_004)
    (join,) = [r for r in m.poll(10_004).requests if r.api == "ConsumerGroupHeartbeat"]
    assert join.body(1)["member_epoch"] == 0


def test_a_closing_member_waits_for_the_coordinator_then_says_goodbye_once():
    m = member()
    joined(m, {T1: [0]})
    m.mark_coordinator_unknown("test", 4000)
    m.leave(4000, revoke=False, close=True)
    reqs = m.poll(4000).requests + m.poll(4100).requests  # (the revocation ends in poll)
    assert m.state is MemberState.LEAVING
    assert not [r for r in reqs if r.api == "ConsumerGroupHeartbeat"]
    (find,) = [r for r in reqs if r.api == "FindCoordinator"]
    m.on_response(find, {"error_code": 0, "node_id": 1, "host": "h", "port": 9092}, 4100)
    (bye,) = [r for r in m.poll(4100).requests if r.api == "ConsumerGroupHeartbeat"]
    assert bye.body(1)["member_epoch"] == -1
    assert not [r for r in m.poll(4101).requests if r.api == "ConsumerGroupHeartbeat"]
    m.on_response(bye, {"error_code": 0, "member_epoch": -1, "member_id": m.member_id,
                        "heartbeat_interval_ms": 0, "assignment": None}, 4102)
    assert m.state is MemberState.CLOSED
