"""The group coordinator state machine against the in-memory fake cluster, on a fake clock."""
from __future__ import annotations

import pytest

from kwire.consumer._codes import E
from kwire.consumer.coordinator import IllegalMemberTransition, MemberState
from kwire.consumer.subscription import FetchState
from kwire.consumer.types import (
    AssignPartitions,
    CommitResult,
    CommittedResult,
    ErrorAction,
    LosePartitions,
    OffsetAndMetadata,
    RevokePartitions,
)
from kwire.errors import (
    CommitFailedError,
    KafkaConnectionError,
    MaxPollIntervalExceededError,
    NotAssignedError,
    RebalanceInProgressError,
)

from .fakes import Driver, FakeCluster
from .members import GroupMember

S = MemberState


def stable(*members):
    return lambda: all(m.state is S.STABLE and not m.coord._rejoin_needed for m in members)


@pytest.fixture
def cluster():
    c = FakeCluster()
    c.create_topic("t", 6)
    return c


@pytest.fixture
def driver(cluster):
    return Driver(cluster)


def apis(driver, name=None, node=None):
    return [(t, n, a) for t, n, a in driver.sent if (name is None or a == name) and (node is None or n == node)]


def no_overlap(*members):
    seen = set()
    for m in members:
        assert not (m.owned & seen), f"overlap: {m.owned & seen}"
        seen |= m.owned
    return seen


# --- joining -----------------------------------------------------------------------------------

def test_join_with_member_id_required(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    joins = [body for _, _, api, _, body in cluster.log if api == "JoinGroup"]
    assert [j["member_id"] for j in joins][0] == ""
    assert joins[1]["member_id"] != "" and joins[1]["member_id"] == a.coord.member_id
    assert a.coord.generation == 1 and a.coord.is_leader
    assert a.owned == {("t", p) for p in range(6)}
    assert isinstance(a.actions[0], AssignPartitions)
    # the assignment reached the subscription state; positions start INITIALIZING
    assert set(a.subs.assigned()) == a.owned


def test_join_without_member_id_required_old_versions(cluster, driver):
    cluster.versions["JoinGroup"] = 3
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    assert len(apis(driver, "JoinGroup")) == 1


def test_join_group_body_fields(cluster, driver):
    a = GroupMember(cluster, driver, session_timeout_ms=6000, max_poll_interval_ms=12000,
                    assignors=("range", "roundrobin"), instance_id="i-1")
    driver.run_until(stable(a))
    join = next(body for _, _, api, _, body in cluster.log if api == "JoinGroup")
    assert join["session_timeout_ms"] == 6000 and join["rebalance_timeout_ms"] == 12000
    assert join["group_instance_id"] == "i-1" and join["protocol_type"] == "consumer"
    assert [p["name"] for p in join["protocols"]] == ["range", "roundrobin"]


def test_two_members_split_then_one_leaves(cluster, driver):
    a = GroupMember(cluster, driver, name="a")
    b = GroupMember(cluster, driver, name="b")
    driver.run_until(stable(a, b))
    assert no_overlap(a, b) == {("t", p) for p in range(6)}
    assert len(a.owned) == len(b.owned) == 3
    assert a.coord.generation == b.coord.generation
    b.coord.leave(driver.clock.now_ms)
    driver.run_until(lambda: b.state is S.UNJOINED and stable(a)() and len(a.owned) == 6)
    assert apis(driver, "LeaveGroup")
    assert b.owned == set() and b.subs.assigned() == []


def test_no_overlap_during_eager_rebalances(cluster, driver):
    members = [GroupMember(cluster, driver, name="a")]
    driver.run_until(stable(*members))
    for name in "bcd":
        members.append(GroupMember(cluster, driver, name=name))
        for _ in range(400):
            driver.step()
            driver.clock.advance(10)
            no_overlap(*members)
            if stable(*members)():
                break
        assert stable(*members)()
    assert no_overlap(*members) == {("t", p) for p in range(6)}


# --- rebalance errors --------------------------------------------------------------------------

def test_rebalance_in_progress_eager_revokes_then_rejoins(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    gen = a.coord.generation
    cluster.inject("Heartbeat", E.REBALANCE_IN_PROGRESS)
    driver.run_until(lambda: a.coord.generation > gen and stable(a)())
    kinds = [type(x).__name__ for x in a.actions]
    assert kinds == ["AssignPartitions", "RevokePartitions", "AssignPartitions"]
    assert not a.of(LosePartitions)


def test_unknown_member_id_loses_partitions_and_rejoins_fresh(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    old_id = a.coord.member_id
    cluster.groups["g"].members.pop(old_id)  # the broker forgot us
    driver.run_until(lambda: a.coord.member_id not in ("", old_id) and stable(a)())
    assert a.of(LosePartitions) and not a.of(RevokePartitions)
    assert a.owned == {("t", p) for p in range(6)}
    joins = [body["member_id"] for _, _, api, _, body in cluster.log if api == "JoinGroup"]
    assert joins[-2] == ""  # asked again for a member id


def test_illegal_generation_keeps_member_id(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    mid = a.coord.member_id
    cluster.inject("Heartbeat", E.ILLEGAL_GENERATION)
    driver.run_until(lambda: a.of(LosePartitions) and stable(a)())
    assert a.coord.member_id == mid


def test_fenced_instance_id_is_fatal(cluster, driver):
    a = GroupMember(cluster, driver, instance_id="static-1")
    driver.run_until(stable(a))
    cluster.inject("Heartbeat", E.FENCED_INSTANCE_ID)
    driver.run_until(lambda: a.errors())
    err = a.errors()[0]
    assert err.name == "FENCED_INSTANCE_ID"
    assert a.of(ErrorAction)[0].fatal
    driver.run(2000)
    assert a.state is S.UNJOINED  # no rejoin after a fatal error
    assert a.coord.failed is err


def test_coordinator_load_in_progress_retries_after_backoff(cluster, driver):
    a = GroupMember(cluster, driver, retry_backoff_ms=200)
    cluster.inject("JoinGroup", E.COORDINATOR_LOAD_IN_PROGRESS)
    driver.run_until(stable(a))
    joins = apis(driver, "JoinGroup")
    assert joins[1][0] - joins[0][0] >= 200


@pytest.mark.parametrize("code", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_moves(cluster, driver, code):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    gen = a.coord.generation
    cluster.coordinator_id = 2
    driver.run_until(lambda: a.coord.coordinator_id == 2, 5000)
    finds = apis(driver, "FindCoordinator")
    assert len(finds) == 2
    driver.run(2000)
    assert apis(driver, "Heartbeat", node=2)
    assert a.coord.generation == gen and a.state is S.STABLE  # membership survived
    assert not a.of(LosePartitions)


def test_coordinator_disconnect_rediscovers_with_backoff(cluster, driver):
    a = GroupMember(cluster, driver, retry_backoff_ms=300)
    driver.run_until(stable(a))
    cluster.inject("Heartbeat", KafkaConnectionError("cut"))
    t0 = driver.clock.now_ms
    driver.run_until(lambda: len(apis(driver, "FindCoordinator")) == 2, 5000)
    assert apis(driver, "FindCoordinator")[1][0] - t0 >= 300
    driver.run(1000)
    assert a.state is S.STABLE


# --- heartbeats, session and poll timeouts ---------------------------------------------------

def test_heartbeat_interval(cluster, driver):
    a = GroupMember(cluster, driver, heartbeat_interval_ms=500, session_timeout_ms=6000)
    driver.run_until(stable(a))
    start = driver.clock.now_ms
    driver.run(10_000)
    beats = [t for t, _, api in driver.sent if api == "Heartbeat" and t >= start]
    assert 19 <= len(beats) <= 21
    gaps = [b - a_ for a_, b in zip(beats, beats[1:])]
    assert min(gaps) >= 500 and max(gaps) <= 520


def test_heartbeats_continue_while_app_processes_revocation(cluster, driver):
    a = GroupMember(cluster, driver, heartbeat_interval_ms=200)
    driver.run_until(stable(a))
    a.auto_ack = False
    cluster.inject("Heartbeat", E.REBALANCE_IN_PROGRESS)
    driver.run_until(lambda: a.of(RevokePartitions))
    assert a.state is S.PREPARING
    t0 = driver.clock.now_ms
    driver.run(2000)
    assert len([t for t, _, api in driver.sent if api == "Heartbeat" and t > t0]) >= 8
    assert a.state is S.PREPARING and not [x for x in apis(driver, "JoinGroup") if x[0] > t0]
    a.coord.ack_revoke(a.of(RevokePartitions)[0].ack_id)
    driver.run_until(stable(a))


def test_session_timeout_without_heartbeat_responses(cluster, driver):
    a = GroupMember(cluster, driver, session_timeout_ms=2000, heartbeat_interval_ms=300)
    driver.run_until(stable(a))
    driver.down_nodes.add(1)
    driver.run(3000)
    assert a.coord.coordinator_id is None
    driver.down_nodes.clear()
    # the fake broker expired the member meanwhile: it rejoins after UNKNOWN_MEMBER_ID
    driver.run_until(lambda: stable(a)() and a.of(LosePartitions), 10000)


def test_max_poll_interval_leaves_then_rejoins_on_poll(cluster, driver):
    a = GroupMember(cluster, driver, name="a", max_poll_interval_ms=3000)
    b = GroupMember(cluster, driver, name="b", max_poll_interval_ms=3000)
    driver.run_until(stable(a, b))
    a.app_polling = False
    driver.run_until(lambda: a.state is S.UNJOINED and stable(b)() and len(b.owned) == 6, 10000)
    assert a.of(LosePartitions) and a.owned == set()
    leaves = [body for _, _, api, _, body in cluster.log if api == "LeaveGroup"]
    assert leaves and leaves[0]["member_id"]  # LeaveGroup v2: the member that left
    driver.run(2000)
    assert a.state is S.UNJOINED  # stays out until the application polls again
    a.app_polling = True
    driver.run_until(lambda: stable(a, b)() and len(a.owned) == 3, 10000)
    no_overlap(a, b)


def test_max_poll_interval_expiry_is_reported_after_the_loss(cluster, driver):
    a = GroupMember(cluster, driver, name="a", max_poll_interval_ms=3000)
    driver.run_until(stable(a))
    a.app_polling = False
    driver.run_until(lambda: a.state is S.UNJOINED, 10000)
    kinds = [type(x) for x in a.actions]
    lost_at = kinds.index(LosePartitions)
    errs = [x for x in a.actions[lost_at:] if isinstance(x, ErrorAction)]
    assert len(errs) == 1 and isinstance(errs[0].error, MaxPollIntervalExceededError)


def test_commit_of_partitions_not_owned_fails(cluster, driver):
    """A member commits only what it owns: never-owned partitions fail at once; a commit
    waiting while its partitions are lost fails when it would be sent (the broker would take
    it under the next generation although another member owns them)."""
    a = GroupMember(cluster, driver, name="a")
    b = GroupMember(cluster, driver, name="b")
    driver.run_until(stable(a, b))
    theirs = sorted(b.owned)[0]
    a.coord.commit({theirs: OffsetAndMetadata(5)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits())
    res = a.commits()[0]
    assert isinstance(res.error, NotAssignedError) and res.error.partitions == [theirs]
    mine = sorted(a.owned)[0]
    # the commit is retried (the coordinator is loading) while the member loses its partitions
    cluster.inject("OffsetCommit", E.COORDINATOR_LOAD_IN_PROGRESS, times=1000)
    a.coord.commit({mine: OffsetAndMetadata(5)}, driver.clock.now_ms)
    cluster.inject("Heartbeat", E.ILLEGAL_GENERATION)
    driver.run_until(lambda: a.of(LosePartitions))
    cluster.injected["OffsetCommit"].clear()
    driver.run_until(lambda: len(a.commits()) == 2)
    assert isinstance(a.commits()[1].error, NotAssignedError)
    assert mine not in cluster.groups["g"].offsets


# --- static membership, close ------------------------------------------------------------------

def test_close_revokes_commits_and_leaves(cluster, driver):
    a = GroupMember(cluster, driver, auto_commit=True)
    driver.run_until(stable(a))
    a.subs.mark_consumed(("t", 0), 42)
    a.coord.leave(driver.clock.now_ms, close=True)
    driver.run_until(lambda: a.coord.closed)
    assert cluster.groups["g"].offsets[("t", 0)][0] == 42
    order = [api for _, _, api in driver.sent if api in ("OffsetCommit", "LeaveGroup")]
    assert order[-2:] == ["OffsetCommit", "LeaveGroup"]
    assert isinstance(a.actions[-1], CommitResult) or a.of(RevokePartitions)


def test_static_member_close_sends_no_leave_group(cluster, driver):
    a = GroupMember(cluster, driver, instance_id="static-1")
    driver.run_until(stable(a))
    a.coord.leave(driver.clock.now_ms, close=True)
    driver.run_until(lambda: a.coord.closed)
    assert not apis(driver, "LeaveGroup")
    assert a.coord.member_id  # kept: a static member may come back under its instance id


def test_close_of_unjoined_consumer_is_immediate(cluster, driver):
    a = GroupMember(cluster, driver, topics=())
    a.coord.leave(driver.clock.now_ms, close=True)
    driver.run_until(lambda: a.coord.closed, 100)


def test_illegal_transition_is_refused(cluster, driver):
    a = GroupMember(cluster, driver)
    with pytest.raises(IllegalMemberTransition):
        a.coord._to(S.STABLE)


# --- commits -----------------------------------------------------------------------------------

def test_commit_carries_generation_and_member_id(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    a.coord.commit({("t", 1): OffsetAndMetadata(7, 3, "md")}, driver.clock.now_ms, token="x")
    driver.run_until(lambda: a.commits())
    body = next(b for _, _, api, _, b in cluster.log if api == "OffsetCommit")
    assert body["generation_id_or_member_epoch"] == a.coord.generation
    assert body["member_id"] == a.coord.member_id
    p = body["topics"][0]["partitions"][0]
    assert (p["committed_offset"], p["committed_leader_epoch"], p["committed_metadata"]) == (7, 3, "md")
    res = a.commits()[0]
    assert res.error is None and res.token == "x"
    assert cluster.groups["g"].offsets[("t", 1)] == (7, 3, "md")


def test_commit_retries_retriable_errors(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    cluster.inject("OffsetCommit", E.COORDINATOR_LOAD_IN_PROGRESS, times=2)
    a.coord.commit({("t", 1): OffsetAndMetadata(9)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits())
    assert a.commits()[0].error is None
    assert len(apis(driver, "OffsetCommit")) == 3


def test_commit_not_coordinator_rediscovers_and_retries(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    cluster.inject("OffsetCommit", E.NOT_COORDINATOR)
    a.coord.commit({("t", 1): OffsetAndMetadata(9)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits())
    assert a.commits()[0].error is None
    assert len(apis(driver, "FindCoordinator")) == 2


def test_commit_after_generation_change_fails(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    cluster.inject("OffsetCommit", E.ILLEGAL_GENERATION)
    a.coord.commit({("t", 1): OffsetAndMetadata(9)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits())
    assert isinstance(a.commits()[0].error, CommitFailedError)
    driver.run_until(stable(a))  # and the member rejoined


def test_stale_async_commit_does_not_overwrite_newer(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    cluster.inject("OffsetCommit", E.COORDINATOR_LOAD_IN_PROGRESS)
    now = driver.clock.now_ms
    a.coord.commit({("t", 1): OffsetAndMetadata(5)}, now)
    driver.run(20)
    a.coord.commit({("t", 1): OffsetAndMetadata(8)}, driver.clock.now_ms)
    driver.run_until(lambda: len(a.commits()) == 2)
    driver.run(500)
    assert cluster.groups["g"].offsets[("t", 1)][0] == 8


def test_auto_commit_bookkeeping(cluster, driver):
    a = GroupMember(cluster, driver, auto_commit=True, auto_commit_interval_ms=1000)
    driver.run_until(stable(a))
    a.subs.mark_consumed(("t", 0), 10)
    a.subs.mark_consumed(("t", 3), 4)
    assert a.subs.uncommitted() == {("t", 0): OffsetAndMetadata(10, None, ""),
                                    ("t", 3): OffsetAndMetadata(4, None, "")}
    driver.run(1100)
    assert a.subs.uncommitted() == {}
    assert cluster.groups["g"].offsets[("t", 0)][0] == 10
    n = len(apis(driver, "OffsetCommit"))
    driver.run(3000)
    assert len(apis(driver, "OffsetCommit")) == n  # nothing new consumed: nothing sent
    a.subs.mark_consumed(("t", 0), 11)
    driver.run(1100)
    assert cluster.groups["g"].offsets[("t", 0)][0] == 11


def test_eager_rebalance_commits_consumed_before_joining(cluster, driver):
    a = GroupMember(cluster, driver, auto_commit=True, auto_commit_interval_ms=60000)
    driver.run_until(stable(a))
    a.subs.mark_consumed(("t", 2), 33)
    cluster.inject("Heartbeat", E.REBALANCE_IN_PROGRESS)
    t0 = driver.clock.now_ms
    driver.run_until(lambda: a.coord.generation == 2 and stable(a)())
    after = [api for t, _, api in driver.sent if t >= t0 and api in ("OffsetCommit", "JoinGroup")]
    assert after[:2] == ["OffsetCommit", "JoinGroup"]
    assert cluster.groups["g"].offsets[("t", 2)][0] == 33


def test_manual_assignment_commit_uses_no_generation(cluster, driver):
    a = GroupMember(cluster, driver, topics=())
    a.subs.assign_manual([("t", 0)])
    a.coord.commit({("t", 0): OffsetAndMetadata(3)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits())
    body = next(b for _, _, api, _, b in cluster.log if api == "OffsetCommit")
    assert body["generation_id_or_member_epoch"] == -1 and body["member_id"] == ""
    assert a.commits()[0].error is None


# --- committed offsets -------------------------------------------------------------------------

@pytest.mark.parametrize("version", [7, 8, 10])
def test_offset_fetch_sets_positions(cluster, driver, version):
    cluster.versions["OffsetFetch"] = version
    cluster.groups.setdefault("g", __import__("tests.consumer.fakes", fromlist=["Group"]).Group("g"))
    cluster.groups["g"].offsets[("t", 0)] = (12, -1, "")
    cluster.groups["g"].offsets[("t", 1)] = (20, 4, "")
    a = GroupMember(cluster, driver)
    driver.run_until(lambda: stable(a)() and not a.subs.in_state(FetchState.INITIALIZING))
    assert a.subs.state(("t", 0)).state is FetchState.FETCHING
    assert a.subs.position(("t", 0)).offset == 12
    # a committed leader epoch means the position is checked with the leader first (KIP-320)
    assert a.subs.state(("t", 1)).state is FetchState.AWAIT_VALIDATION
    assert a.subs.position(("t", 1)).offset_epoch == 4
    # nothing committed: reset by policy
    assert a.subs.state(("t", 2)).state is FetchState.AWAIT_RESET
    body = next(b for _, _, api, v, b in cluster.log if api == "OffsetFetch")
    if version >= 8:
        assert body["groups"][0]["group_id"] == "g"
    else:
        assert body["group_id"] == "g"


def test_offset_fetch_no_offset_with_reset_error(cluster, driver):
    a = GroupMember(cluster, driver, reset="error")
    driver.run_until(lambda: stable(a)() and a.errors())
    from kwire.errors import NoOffsetForPartitionError
    assert all(isinstance(e, NoOffsetForPartitionError) for e in a.errors())
    assert all(a.subs.state(tp).blocked for tp in a.subs.assigned())


def test_committed_query(cluster, driver):
    a = GroupMember(cluster, driver, topics=())
    from .fakes import Group
    cluster.groups["g"] = Group("g")
    cluster.groups["g"].offsets[("t", 4)] = (99, 2, "hello")
    a.coord.fetch_committed([("t", 4), ("t", 5)], driver.clock.now_ms, token=1)
    driver.run_until(lambda: a.of(CommittedResult))
    res = a.of(CommittedResult)[0]
    assert res.error is None
    assert res.offsets[("t", 4)][0] == OffsetAndMetadata(99, 2, "hello")
    assert res.offsets[("t", 5)][0].offset == -1


def test_offset_commit_and_fetch_cap_version_without_topic_ids(driver):
    c = driver.cluster
    c.create_topic("noid", 1, with_id=False)
    a = GroupMember(c, driver, topics=("noid",))
    driver.run_until(stable(a))
    a.coord.commit({("noid", 0): OffsetAndMetadata(1)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits())
    assert a.commits()[0].error is None
    versions = {api: v for _, _, api, v, _ in c.log}
    assert versions["OffsetCommit"] <= 9 and versions["OffsetFetch"] <= 9


# --- cooperative -------------------------------------------------------------------------------

def test_cooperative_commit_goes_through_while_the_group_prepares_a_rebalance(cluster, driver):
    """A cooperative member keeps its partitions while rejoining, and the broker takes commits
    of the current generation until the join completes: a commit made while the JoinGroup is
    held is sent and succeeds, rather than waiting out the rebalance."""
    a = GroupMember(cluster, driver, name="a", assignors=("cooperative-sticky",))
    b = GroupMember(cluster, driver, name="b", assignors=("cooperative-sticky",))
    driver.run_until(stable(a, b))
    # b does not hear of the rebalance (its heartbeats keep failing): the join waits for it
    cluster.inject("Heartbeat", E.COORDINATOR_LOAD_IN_PROGRESS, times=100_000)
    a.coord.request_rejoin("test")
    driver.run_until(lambda: a.state is S.JOINING and a.coord._join_inflight)
    mine = sorted(a.owned)[0]
    a.coord.commit({mine: OffsetAndMetadata(11)}, driver.clock.now_ms)
    driver.run_until(lambda: a.commits(), 5000)
    assert a.commits()[0].error is None
    assert a.state is S.JOINING  # still waiting for b
    assert cluster.groups["g"].offsets[mine][0] == 11
    cluster.injected["Heartbeat"].clear()
    driver.run_until(stable(a, b), 60_000)


def test_commit_between_join_and_sync_fails_fast_and_retriable(cluster, driver):
    """Between JoinGroup and SyncGroup the broker refuses commits: fail at once, retriable."""
    a = GroupMember(cluster, driver, name="a", assignors=("cooperative-sticky",))
    driver.run_until(stable(a))
    mine = sorted(a.owned)[0]
    a.coord.request_rejoin("test")
    driver.run_until(lambda: a.state is S.SYNCING)
    a.coord.commit({mine: OffsetAndMetadata(12)}, driver.clock.now_ms)
    a.coord.poll(driver.clock.now_ms)
    a._actions(driver.clock.now_ms)
    res = a.commits()[0]
    assert isinstance(res.error, RebalanceInProgressError) and res.error.retriable
    assert not [b for _, _, api, _, b in cluster.log if api == "OffsetCommit"]


def test_cooperative_rebalance_moves_only_what_must_move(cluster, driver):
    a = GroupMember(cluster, driver, name="a", assignors=("cooperative-sticky",))
    driver.run_until(stable(a))
    assert len(a.owned) == 6
    b = GroupMember(cluster, driver, name="b", assignors=("cooperative-sticky",))
    for _ in range(2000):
        driver.step()
        driver.clock.advance(10)
        no_overlap(a, b)
        if stable(a, b)() and len(b.owned) == 3:
            break
    assert len(a.owned) == 3 and len(b.owned) == 3
    # a never revoked everything: only the three partitions that moved
    revokes = a.of(RevokePartitions)
    assert len(revokes) == 1 and len(revokes[0].partitions) == 3 and revokes[0].incremental
    assert not a.of(LosePartitions)
    # a's JoinGroup for the second rebalance listed what it owned
    from kwire.consumer.assignors import decode_member_subscription
    join = [b_ for _, _, api, _, b_ in cluster.log if api == "JoinGroup" and b_["member_id"] == a.coord.member_id]
    sub = decode_member_subscription("a", bytes(join[-2]["protocols"][0]["metadata"]))
    assert len(sub.owned_partitions) in (3, 6)


def test_cooperative_member_leaving_hands_over_without_revoking_others(cluster, driver):
    a = GroupMember(cluster, driver, name="a", assignors=("cooperative-sticky",))
    b = GroupMember(cluster, driver, name="b", assignors=("cooperative-sticky",))
    driver.run_until(lambda: stable(a, b)() and len(a.owned) == 3 and len(b.owned) == 3, 20000)
    before = set(a.owned)
    n_revokes = len(a.of(RevokePartitions))
    b.coord.leave(driver.clock.now_ms)
    driver.run_until(lambda: stable(a)() and len(a.owned) == 6, 20000)
    assert before <= a.owned
    assert len(a.of(RevokePartitions)) == n_revokes


def test_eager_and_cooperative_protocol_selection():
    from kwire.consumer.assignors import COOPERATIVE, EAGER, get_assignor, rebalance_protocol
    assert rebalance_protocol([get_assignor("cooperative-sticky")]) == COOPERATIVE
    assert rebalance_protocol([get_assignor("range"), get_assignor("cooperative-sticky")]) == EAGER


def test_pattern_subscription_joins_with_matching_topics(driver):
    c = driver.cluster
    c.create_topic("logs-a", 2)
    c.create_topic("logs-b", 1)
    c.create_topic("other", 1)
    a = GroupMember(c, driver, topics=("^logs-.*",))
    driver.run_until(stable(a))
    assert a.owned == {("logs-a", 0), ("logs-a", 1), ("logs-b", 0)}
    c.create_topic("logs-c", 1)
    a.coord.on_metadata(c.topics, c.topic_ids, driver.clock.now_ms)
    driver.run_until(lambda: ("logs-c", 0) in a.owned and stable(a)())


def test_partition_count_change_triggers_rejoin(cluster, driver):
    a = GroupMember(cluster, driver)
    driver.run_until(stable(a))
    cluster.create_topic("t", 8)
    a.coord.on_metadata(cluster.topics, cluster.topic_ids, driver.clock.now_ms)
    driver.run_until(lambda: len(a.owned) == 8 and stable(a)())


def test_next_deadline_tracks_heartbeat(cluster, driver):
    a = GroupMember(cluster, driver, heartbeat_interval_ms=500)
    driver.run_until(stable(a))
    driver.run(50)
    d = a.coord.poll(driver.clock.now_ms).next_deadline_ms
    assert d is not None and driver.clock.now_ms <= d <= driver.clock.now_ms + 500
