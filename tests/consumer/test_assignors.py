"""Assignors: exact layouts for range/roundrobin, properties for all three, and the embedded
consumer-protocol payloads."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwire.consumer.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    decode_member_assignment,
    decode_member_subscription,
    decode_sticky_user_data,
    encode_member_assignment,
    encode_member_subscription,
    encode_sticky_user_data,
    get_assignor,
)


def M(mid, topics, owned=(), gen=-1, iid=None):
    return MemberSubscription(mid, tuple(topics), tuple(owned), gen, iid)


def test_range_layout():
    out = RangeAssignor().assign([M("b", ["t"]), M("a", ["t"]), M("c", ["t"])], {"t": 7})
    assert out == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)],
                   "c": [("t", 5), ("t", 6)]}


def test_range_is_per_topic():
    out = RangeAssignor().assign([M("a", ["t", "u"]), M("b", ["t"])], {"t": 2, "u": 3})
    assert out == {"a": [("t", 0), ("u", 0), ("u", 1), ("u", 2)], "b": [("t", 1)]}


def test_range_static_members_sort_first_by_instance_id():
    out = RangeAssignor().assign([M("a", ["t"]), M("z", ["t"], iid="i-1")], {"t": 2})
    assert out == {"z": [("t", 0)], "a": [("t", 1)]}


def test_roundrobin_layout():
    out = RoundRobinAssignor().assign([M("a", ["t", "u"]), M("b", ["t", "u"])], {"t": 3, "u": 2})
    assert out == {"a": [("t", 0), ("t", 2), ("u", 1)], "b": [("t", 1), ("u", 0)]}


def test_roundrobin_skips_unsubscribed():
    out = RoundRobinAssignor().assign([M("a", ["t"]), M("b", ["u"])], {"t": 2, "u": 2})
    assert out == {"a": [("t", 0), ("t", 1)], "b": [("u", 0), ("u", 1)]}


# --- properties ---------------------------------------------------------------------------------

topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 12), min_size=1)


@st.composite
def groups(draw, same_subscription=False):
    counts = draw(topics_st)
    n = draw(st.integers(1, 7))
    names = sorted(counts)
    members = []
    for i in range(n):
        if same_subscription:
            subs = names
        else:
            subs = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        members.append(M(f"m{i:02d}", subs))
    return members, counts


def check_valid(members, counts, out):
    assert set(out) == {m.member_id for m in members}
    all_tps = [tp for tps in out.values() for tp in tps]
    assert len(all_tps) == len(set(all_tps)), "a partition assigned twice"
    subs = {m.member_id: set(m.topics) for m in members}
    for mid, tps in out.items():
        assert all(t in subs[mid] for t, _ in tps), "assigned an unsubscribed topic"
    wanted = {(t, p) for t, n in counts.items() for p in range(n) if any(t in s for s in subs.values())}
    return set(all_tps), wanted


@settings(max_examples=200, deadline=None)
@given(groups())
def test_range_properties(g):
    members, counts = g
    out = RangeAssignor().assign(members, counts)
    got, wanted = check_valid(members, counts, out)
    assert got == wanted
    for t in counts:  # per topic, the members subscribed to it differ by at most one
        loads = [sum(1 for tp in out[m.member_id] if tp[0] == t) for m in members if t in m.topics]
        if loads:
            assert max(loads) - min(loads) <= 1


@settings(max_examples=200, deadline=None)
@given(groups(same_subscription=True))
def test_roundrobin_balanced_for_equal_subscriptions(g):
    members, counts = g
    out = RoundRobinAssignor().assign(members, counts)
    got, wanted = check_valid(members, counts, out)
    assert got == wanted
    loads = [len(v) for v in out.values()]
    assert max(loads) - min(loads) <= 1


@settings(max_examples=200, deadline=None)
@given(groups())
def test_roundrobin_covers_everything(g):
    members, counts = g
    got, wanted = check_valid(members, counts, RoundRobinAssignor().assign(members, counts))
    assert got == wanted


def balanced(members, out):
    """No partition could move to an eligible member with two fewer partitions."""
    subs = {m.member_id: set(m.topics) for m in members}
    for mid, tps in out.items():
        for t, _ in tps:
            for other in out:
                if other != mid and t in subs[other] and len(out[other]) < len(tps) - 1:
                    return False
    return True


@settings(max_examples=200, deadline=None)
@given(groups())
def test_sticky_fresh_assignment_is_complete_and_balanced(g):
    members, counts = g
    out = CooperativeStickyAssignor().assign(members, counts)
    got, wanted = check_valid(members, counts, out)
    assert got == wanted  # nobody owned anything: nothing waits for a revocation
    assert balanced(members, out)


def cooperative_rounds(members_topics, counts, previous, generation=1):
    """Run the cooperative protocol until nothing moves any more, checking that no partition
    ever has two owners.  ``previous``: {member: owned}.  Returns (settled assignment, rounds)."""
    owned = {m: list(previous.get(m, [])) for m in members_topics}
    a = CooperativeStickyAssignor()
    for rounds in range(1, 6):
        members = [M(m, ts, owned[m], generation) for m, ts in members_topics.items()]
        out = a.assign(members, counts)
        changed = False
        for m in members_topics:
            revoked = set(owned[m]) - set(out[m])
            added = set(out[m]) - set(owned[m])
            others = {tp for o, tps in owned.items() if o != m for tp in tps}
            assert not (added & others), "cooperative assignment handed out an owned partition"
            owned[m] = [tp for tp in owned[m] if tp not in revoked] + sorted(added)
            changed = changed or bool(revoked or added)
        if not changed:
            return out, rounds
        generation += 1
    raise AssertionError("the cooperative protocol did not settle")


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 30))
def test_sticky_member_joins_moves_minimum_and_settles(n_old, n_new, n_parts):
    counts = {"t": n_parts}
    old = {f"m{i}": ["t"] for i in range(n_old)}
    first = CooperativeStickyAssignor().assign([M(m, ts) for m, ts in old.items()], counts)
    everyone = dict(old, **{f"n{i}": ["t"] for i in range(n_new)})
    settled, rounds = cooperative_rounds(everyone, counts, first)
    assert rounds <= 3  # the join round, the hand-over round, the quiet one
    got, wanted = check_valid([M(m, ts) for m, ts in everyone.items()], counts, settled)
    assert got == wanted
    loads = [len(v) for v in settled.values()]
    assert max(loads) - min(loads) <= 1
    # stickiness: an old member gives up at most what it holds beyond the lower quota
    quota_lo = n_parts // len(everyone)
    moved = sum(len(set(first[m]) - set(settled[m])) for m in old)
    assert moved <= sum(max(0, len(first[m]) - quota_lo) for m in old)
    assert all(set(settled[m]) <= set(first[m]) or len(first[m]) < quota_lo + 1 for m in old)


def test_sticky_keeps_owned_partitions_when_balanced():
    members = [M("a", ["t"], [("t", 0), ("t", 3)], 5), M("b", ["t"], [("t", 1), ("t", 2)], 5)]
    out = CooperativeStickyAssignor().assign(members, {"t": 4})
    assert out == {"a": [("t", 0), ("t", 3)], "b": [("t", 1), ("t", 2)]}


def test_sticky_newer_generation_wins_a_double_claim():
    members = [M("a", ["t"], [("t", 0)], 5), M("b", ["t"], [("t", 0)], 4)]
    out = CooperativeStickyAssignor().assign(members, {"t": 2})
    assert ("t", 0) in out["a"] and ("t", 0) not in out["b"]


def test_sticky_reads_librdkafka_user_data_when_subscription_has_no_owned():
    ud = encode_sticky_user_data([("t", 1)], 7)
    members = [MemberSubscription("a", ("t",), (), -1, None, None, ud), M("b", ["t"])]
    out = CooperativeStickyAssignor().assign(members, {"t": 2})
    assert out["a"] == [("t", 1)]


# --- payloads ---------------------------------------------------------------------------------

def test_subscription_roundtrip():
    data = encode_member_subscription(["b", "a"], owned=[("a", 1), ("a", 0)], generation=3,
                                      user_data=b"xy", rack_id="r1")
    sub = decode_member_subscription("m", data, "inst")
    assert sub.topics == ("a", "b") and sub.owned_partitions == (("a", 0), ("a", 1))
    assert sub.generation == 3 and sub.user_data == b"xy" and sub.group_instance_id == "inst"


def test_subscription_v0_has_no_generation():
    data = encode_member_subscription(["a"], version=0)
    assert data[:2] == b"\x00\x00"
    sub = decode_member_subscription("m", data)
    assert sub.generation == -1 and sub.owned_partitions == ()


def test_assignment_roundtrip_and_empty():
    data = encode_member_assignment([("b", 0), ("a", 2), ("a", 1)])
    assert decode_member_assignment(data).partitions == [("a", 1), ("a", 2), ("b", 0)]
    assert decode_member_assignment(b"").partitions == []


def test_sticky_user_data_layouts():
    ud = encode_sticky_user_data([("t", 0), ("u", 3)], 9)
    assert decode_sticky_user_data(ud) == ([("t", 0), ("u", 3)], 9)
    assert decode_sticky_user_data(b"\x00\x00\x00\x05") == ([], 5)
    assert decode_sticky_user_data(b"\x01garbage") is None


def test_confluent_kafka_can_read_our_payloads():
    """librdkafka decodes what we send (checked against its own encoding conventions: the
    version prefix, topics as strings, partitions as int32 arrays)."""
    import struct
    data = encode_member_subscription(["t"], version=0)
    version, n_topics = struct.unpack_from(">hi", data, 0)
    assert version == 0 and n_topics == 1
    data = encode_member_assignment([("t", 0)], version=0)
    version, n_topics, ln = struct.unpack_from(">hih", data, 0)
    assert (version, n_topics, ln) == (0, 1, 1)


def test_get_assignor_unknown():
    with pytest.raises(ValueError):
        get_assignor("sticky-foo")
    assert Counter(a.name for a in map(get_assignor, ["range", "roundrobin", "cooperative-sticky"]))
