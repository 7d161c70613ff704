"""The KIP-848 member (ConsumerGroupMember) as a state machine: requests out, hand-written
broker answers in, no I/O.  The paths a real broker rarely takes on cue -- a stale epoch on a
commit, a target naming a topic metadata does not know yet, a v0 broker that names the member,
fencing mid-reconciliation, the fields a heartbeat repeats -- are driven here; the everyday ones
run on Apache Kafka in test_kip848.py."""
from __future__ import annotations

import uuid

import pytest

from kwire.consumer.assignors import get_assignor
from kwire.consumer.coordinator import MemberState
from kwire.consumer.member import ConsumerGroupMember, broker_regex
from kwire.consumer.subscription import SubscriptionState
from kwire.consumer.types import (
    AssignPartitions,
    CommitResult,
    ErrorAction,
    LosePartitions,
    OffsetAndMetadata,
    RevokePartitions,
)

T1, T2 = uuid.uuid4(), uuid.uuid4()


def member(*, topics=("a",), instance_id=None, auto_commit=False):
    subs = SubscriptionState("earliest")
    subs.subscribe(list(topics))
    m = ConsumerGroupMember(subs, group_id="g", assignors=[get_assignor("range")],
                            group_instance_id=instance_id, heartbeat_interval_ms=3000,
                            retry_backoff_ms=100, enable_auto_commit=auto_commit, now_ms=0)
    m.on_metadata({"a": 2}, {"a": T1})
    return m


def find(m, now=0):
    reqs = m.poll(now).requests
    (req,) = [r for r in reqs if r.api == "FindCoordinator"]
    m.on_response(req, {"error_code": 0, "node_id": 1, "host": "h", "port": 9092}, now)


def heartbeat(m, now):
    reqs = [r for r in m.poll(now).requests if r.api == "ConsumerGroupHeartbeat"]
    assert len(reqs) == 1, reqs
    return reqs[0]


def answer(m, req, now, *, epoch=1, assignment=None, code=0, interval=3000, member_id=None):
    resp = {"error_code": code, "error_message": None, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval,
            "assignment": None if assignment is None else {"topic_partitions": [
                {"topic_id": tid, "partitions": ps} for tid, ps in assignment.items()]}}
    m.on_response(req, resp, now)


def retarget(m, now, epoch, assignment):
    """The member's next heartbeat brings a new target; what the poll after it asks for."""
    answer(m, heartbeat(m, now), now, epoch=epoch, assignment=assignment)
    m.poll(now)
    return m.drain_actions()


def joined(m, assignment, now=0):
    find(m, now)
    req = heartbeat(m, now)
    answer(m, req, now, epoch=1, assignment=assignment)
    for ack in [r for r in m.poll(now).requests if r.api == "ConsumerGroupHeartbeat"]:
        answer(m, ack, now, epoch=1)
    return m.drain_actions()


def test_join_heartbeat_carries_every_field_then_only_changes():
    m = member()
    find(m)
    req = heartbeat(m, 0)
    body = req.body(1)
    assert body["member_epoch"] == 0 and body["member_id"] == m.member_id and m.member_id
    assert body["subscribed_topic_names"] == ["a"] and body["topic_partitions"] == []
    assert body["subscribed_topic_regex"] == ""  # (librdkafka's mock cluster needs it said)
    assert body["rebalance_timeout_ms"] == 300000
    answer(m, req, 0, epoch=1, assignment={T1: [0, 1]})
    (ack,) = [r for r in m.poll(1).requests if r.api == "ConsumerGroupHeartbeat"]
    (assign,) = [a for a in m.drain_actions() if isinstance(a, AssignPartitions)]
    assert assign.partitions == [("a", 0), ("a", 1)] and assign.incremental
    # the acknowledgement goes at once, in the same poll, naming what the member now owns
    b = ack.body(1)
    assert b["member_epoch"] == 1 and b["topic_partitions"] == [{"topic_id": T1, "partitions": [0, 1]}]
    assert b["subscribed_topic_names"] is None and b["rebalance_timeout_ms"] == -1
    answer(m, ack, 1, epoch=1)
    # then nothing until the interval, and a bare heartbeat
    res = m.poll(2)
    assert res.requests == [] and res.next_deadline_ms == 3001
    b = heartbeat(m, 3001).body(1)
    assert b["topic_partitions"] is None and b["subscribed_topic_names"] is None


def test_v0_broker_names_the_member():
    m = member()
    find(m)
    req = heartbeat(m, 0)
    assert req.body(0)["member_id"] == ""  # KIP-1082 came with v1
    answer(m, req, 0, epoch=1, member_id="broker-made", assignment={})
    assert m.member_id == "broker-made"
    assert heartbeat(m, 5000).body(0)["member_id"] == "broker-made"


def test_revoke_first_then_assign_then_acknowledge():
    m = member()
    joined(m, {T1: [0, 1]})
    (rev,) = retarget(m, 3000, 2, {T1: [1]})
    assert isinstance(rev, RevokePartitions) and rev.partitions == [("a", 0)]
    # until the application acknowledges, the member owns both and says nothing new
    assert m.subs.is_assigned(("a", 0))
    assert m.poll(3001).requests == []
    m.ack_revoke(rev.ack_id)
    reqs = m.poll(3002).requests
    assert [a.partitions for a in m.drain_actions()] == []  # nothing arrives: no on_assign
    assert not m.subs.is_assigned(("a", 0))
    (ack,) = [r for r in reqs if r.api == "ConsumerGroupHeartbeat"]
    assert ack.body(1)["topic_partitions"] == [{"topic_id": T1, "partitions": [1]}]


def test_a_target_naming_an_unknown_topic_waits_for_metadata():
    m = member(topics=("^.*",))
    joined(m, {T1: [0]})
    assert retarget(m, 3000, 2, {T1: [0], T2: [0, 1]}) == [] and m.needs_metadata
    res = m.poll(3000)  # no busy loop while metadata is on its way
    assert res.requests == [] and (res.next_deadline_ms is None or res.next_deadline_ms > 3000)
    m.on_metadata({"a": 2, "b": 2}, {"a": T1, "b": T2})
    m.poll(3001)
    (assign,) = m.drain_actions()
    assert assign.partitions == [("b", 0), ("b", 1)]


def test_fenced_mid_reconciliation_loses_everything_and_joins_with_epoch_zero():
    m = member()
    joined(m, {T1: [0, 1]})
    (rev,) = retarget(m, 3000, 2, {T1: [1]})
    req = heartbeat(m, 6000)
    answer(m, req, 6000, code=110)  # FENCED_MEMBER_EPOCH
    (lost,) = m.drain_actions()
    assert isinstance(lost, LosePartitions) and lost.partitions == [("a", 0), ("a", 1)]
    assert m.subs.assigned() == [] and m.state is MemberState.JOINING
    member_id = m.member_id
    m.ack_revoke(rev.ack_id)  # the application's late acknowledgement changes nothing
    rejoin = heartbeat(m, 6001).body(1)
    assert rejoin["member_epoch"] == 0 and rejoin["member_id"] == member_id
    assert rejoin["subscribed_topic_names"] == ["a"] and rejoin["topic_partitions"] == []


@pytest.mark.parametrize("code", [111, 82, 112, 128])  # UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION
def test_fatal_heartbeat_errors_stop_the_member(code):
    m = member(instance_id="i")
    joined(m, {T1: [0]})
    req = heartbeat(m, 3000)
    answer(m, req, 3000, code=code)
    actions = m.drain_actions()
    assert any(isinstance(a, ErrorAction) and a.fatal for a in actions)
    assert any(isinstance(a, LosePartitions) for a in actions)
    assert m.state is MemberState.UNJOINED
    assert [r for r in m.poll(10000).requests if r.api == "ConsumerGroupHeartbeat"] == []


def test_commit_with_a_stale_epoch_is_sent_again_with_the_current_one():
    m = member()
    joined(m, {T1: [0]})
    m.commit({("a", 0): OffsetAndMetadata(5)}, 100, token="t")
    (c,) = [r for r in m.poll(100).requests if r.api == "OffsetCommit"]
    assert c.body(9)["generation_id_or_member_epoch"] == 1 and c.body(9)["member_id"] == m.member_id
    hb = heartbeat(m, 3000)
    answer(m, hb, 3000, epoch=4)
    m.on_response(c, {"topics": [{"name": "a", "partitions": [
        {"partition_index": 0, "error_code": 113}]}]}, 3000)  # STALE_MEMBER_EPOCH
    assert m.drain_actions() == []
    (again,) = [r for r in m.poll(3200).requests if r.api == "OffsetCommit"]
    assert again.body(9)["generation_id_or_member_epoch"] == 4
    m.on_response(again, {"topics": [{"name": "a", "partitions": [
        {"partition_index": 0, "error_code": 0}]}]}, 3200)
    (res,) = m.drain_actions()
    assert isinstance(res, CommitResult) and res.error is None and res.token == "t"


def test_static_member_leaves_with_epoch_minus_two_dynamic_with_minus_one():
    for instance, epoch in (("i", -2), (None, -1)):
        m = member(instance_id=instance)
        joined(m, {T1: [0]})
        m.leave(4000, revoke=False, close=True)
        reqs = m.poll(4000).requests
        (leave,) = [r for r in reqs if r.api == "ConsumerGroupHeartbeat"]
        assert leave.body(1)["member_epoch"] == epoch
        m.on_response(leave, {"error_code": 0, "member_epoch": epoch, "member_id": m.member_id,
                              "heartbeat_interval_ms": 0, "assignment": None}, 4001)
        assert m.state is MemberState.CLOSED


def test_leave_while_the_join_heartbeat_is_in_flight_still_says_goodbye():
    m = member()
    find(m)
    join = heartbeat(m, 0)
    m.leave(1, revoke=False, close=True)
    (leave,) = [r for r in m.poll(1).requests if r.api == "ConsumerGroupHeartbeat"]
    assert leave.body(1)["member_epoch"] == -1
    answer(m, join, 2, epoch=1, assignment={T1: [0]})  # late: ignored
    assert m.subs.assigned() == []


def test_subscription_change_is_sent_at_once():
    m = member()
    joined(m, {T1: [0]})
    m.subs.subscribe(["a", "b"])
    m.on_subscription_changed()
    # at once, not at the next heartbeat interval
    assert heartbeat(m, 2).body(1)["subscribed_topic_names"] == ["a", "b"]


def test_broker_regex_keeps_kwire_prefix_semantics():
    subs = SubscriptionState("earliest")
    subs.subscribe(["^orders\\..*", "^logs", "plain.name-1"])
    assert broker_regex(subs.topics, subs.patterns) == \
        "(?:orders\\..*).*|(?:logs).*|plain\\.name-1"


def test_offset_fetch_names_the_member_and_retries_a_stale_epoch():
    m = member()
    find(m)
    answer(m, heartbeat(m, 0), 0, epoch=1, assignment={T1: [0]})
    (f,) = [r for r in m.poll(10).requests if r.api == "OffsetFetch"]
    m.drain_actions()
    g = f.body(9)["groups"][0]
    assert (g["member_id"], g["member_epoch"]) == (m.member_id, 1)
    m.on_response(f, {"groups": [{"group_id": "g", "error_code": 113, "topics": []}]}, 10)
    assert m.drain_actions() == []  # no error for the application: asked again
    (again,) = [r for r in m.poll(200).requests if r.api == "OffsetFetch"]
    m.on_response(again, {"groups": [{"group_id": "g", "error_code": 0, "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                      "committed_leader_epoch": -1, "metadata": "",
                                      "error_code": 0}]}]}]}, 200)
    assert m.subs.state(("a", 0)).position.offset == 7


def test_an_answer_with_epoch_zero_keeps_the_member_joining():
    """librdkafka's mock cluster answers a join with epoch 0 until it has an assignment for
    the member: it is not a member yet, and the next heartbeat is a full join again."""
    m = member()
    find(m)
    answer(m, heartbeat(m, 0), 0, epoch=0)
    assert m.state is MemberState.JOINING
    again = heartbeat(m, 3000).body(1)
    assert again["member_epoch"] == 0 and again["subscribed_topic_names"] == ["a"]
    assert again["rebalance_timeout_ms"] == 300000 and again["topic_partitions"] == []


def test_the_broker_sets_the_heartbeat_interval():
    # configured 3000; the broker's group.consumer.heartbeat.interval.ms rules (KIP-848)
    m = member()
    find(m)
    answer(m, heartbeat(m, 0), 0, epoch=1, assignment={}, interval=750)
    assert m.heartbeat.interval_ms == 750
    res = m.poll(749)
    assert res.requests == [] and res.next_deadline_ms == 750
    req = heartbeat(m, 750)
    # an answer without an interval (0) keeps the broker's last one
    answer(m, req, 750, epoch=1, interval=0)
    assert m.poll(751).next_deadline_ms == 1500
    answer(m, heartbeat(m, 1500), 1500, epoch=1, interval=5000)
    res = m.poll(6499)
    assert res.requests == [] and res.next_deadline_ms == 6500


def test_a_target_that_revokes_and_adds_revokes_first_then_assigns():
    m = member()
    joined(m, {T1: [0]})
    (rev,) = retarget(m, 3000, 2, {T1: [1]})
    assert isinstance(rev, RevokePartitions) and rev.partitions == [("a", 0)]
    # nothing is assigned before the application has given up what it loses
    assert m.poll(3001).requests == [] and m.drain_actions() == []
    assert m.subs.is_assigned(("a", 0)) and not m.subs.is_assigned(("a", 1))
    m.ack_revoke(rev.ack_id)
    reqs = m.poll(3002).requests
    (assign,) = m.drain_actions()
    assert isinstance(assign, AssignPartitions) and assign.partitions == [("a", 1)]
    assert assign.incremental
    assert m.subs.assigned() == [("a", 1)]
    # the acknowledgement names what the member owns now: [1] alone, at the new epoch
    (ack,) = [r for r in reqs if r.api == "ConsumerGroupHeartbeat"]
    body = ack.body(1)
    assert body["member_epoch"] == 2
    assert body["topic_partitions"] == [{"topic_id": T1, "partitions": [1]}]
