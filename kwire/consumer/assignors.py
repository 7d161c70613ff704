"""Partition assignors of the classic consumer group protocol: range, roundrobin and
cooperative-sticky (KIP-429).

The group leader runs the assignor named by the JoinGroup response over every member's
subscription.  Assignors here are pure, deterministic functions::

    assign(members: list[MemberSubscription], partitions_per_topic: {topic: count})
        -> {member_id: [(topic, partition), ...]}

Every member's JoinGroup carries its subscription in the consumer protocol's embedded format
(``ConsumerProtocolSubscription``; kwire writes v3: topics, user_data, owned_partitions,
generation_id, rack_id), and SyncGroup carries each member's ``ConsumerProtocolAssignment``.
The protocol names ("range", "roundrobin", "cooperative-sticky") are those the Java client and
librdkafka register, so mixed groups agree on what each name means.

Sticky user data.  Java's cooperative-sticky reads the generation from the subscription
(v2+); librdkafka's reads the sticky assignor's user data, whose layout is::

    user_data = previous_assignment:[topic:string partitions:[int32]] generation:int32

kwire writes both (the subscription fields and that user data) and reads whichever is there.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.api import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

TP = tuple[str, int]  # (topic, partition)

EAGER = "eager"
COOPERATIVE = "cooperative"

SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 1
DEFAULT_GENERATION = -1


@dataclass(frozen=True)
class MemberSubscription:
    """One member's subscription as the leader sees it."""

    member_id: str
    topics: tuple[str, ...]
    owned_partitions: tuple[TP, ...] = ()
    generation: int = DEFAULT_GENERATION
    group_instance_id: str | None = None
    rack_id: str | None = None
    user_data: bytes | None = None

    def sort_key(self) -> tuple[int, str, str]:
        # Static members first, by instance id; then dynamic members by member id.  (The order
        # Java's and librdkafka's range assignors use, so a mixed group computes alike.)
        if self.group_instance_id:
            return (0, self.group_instance_id, self.member_id)
        return (1, self.member_id, "")


@dataclass
class Assignment:
    partitions: list[TP] = field(default_factory=list)
    user_data: bytes | None = None


# --- embedded payloads ----------------------------------------------------------------------------

def _group_by_topic(tps: Iterable[TP]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(tps)):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def encode_member_subscription(topics: Iterable[str], *, owned: Iterable[TP] = (),
                               generation: int = DEFAULT_GENERATION, user_data: bytes | None = None,
                               rack_id: str | None = None,
                               version: int = SUBSCRIPTION_VERSION) -> bytes:
    return encode_subscription(version, {
        "topics": sorted(set(topics)), "user_data": user_data,
        "owned_partitions": _group_by_topic(owned), "generation_id": generation,
        "rack_id": rack_id})


def decode_member_subscription(member_id: str, metadata: bytes,
                               group_instance_id: str | None = None) -> MemberSubscription:
    version, value = decode_subscription(metadata)
    owned = tuple((o["topic"], p) for o in (value.get("owned_partitions") or ())
                  for p in o["partitions"])
    user_data = value.get("user_data")
    if user_data is not None:
        user_data = bytes(user_data)
    generation = value.get("generation_id", DEFAULT_GENERATION) if version >= 2 else DEFAULT_GENERATION
    if generation is None:
        generation = DEFAULT_GENERATION
    return MemberSubscription(member_id=member_id, topics=tuple(value.get("topics") or ()),
                              owned_partitions=owned, generation=generation,
                              group_instance_id=group_instance_id, rack_id=value.get("rack_id"),
                              user_data=user_data)


def encode_member_assignment(partitions: Iterable[TP], user_data: bytes | None = None,
                             version: int = ASSIGNMENT_VERSION) -> bytes:
    return encode_assignment(version, {"assigned_partitions": _group_by_topic(partitions),
                                       "user_data": user_data})


def decode_member_assignment(data: bytes | bytearray | memoryview | None) -> Assignment:
    if data is None or len(data) == 0:
        return Assignment([], None)  # a member with nothing assigned may get empty bytes
    _, value = decode_assignment(data)
    tps = [(a["topic"], p) for a in (value.get("assigned_partitions") or ()) for p in a["partitions"]]
    ud = value.get("user_data")
    return Assignment(tps, bytes(ud) if ud is not None else None)


_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def encode_sticky_user_data(previous: Iterable[TP], generation: int) -> bytes:
    """librdkafka's / Java's StickyAssignor user data v1."""
    out = bytearray()
    groups = _group_by_topic(previous)
    out += _I32.pack(len(groups))
    for g in groups:
        name = g["topic"].encode()
        out += _I16.pack(len(name)) + name + _I32.pack(len(g["partitions"]))
        for p in g["partitions"]:
            out += _I32.pack(p)
    out += _I32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes) -> tuple[list[TP], int] | None:
    """(previous assignment, generation) or None when ``data`` is not in that layout.  A bare
    int32 (Java's cooperative-sticky user data) gives ([], generation)."""
    if not data:
        return None
    if len(data) == 4:
        return [], _I32.unpack(data)[0]
    try:
        pos = 0
        (n_topics,) = _I32.unpack_from(data, pos)
        pos += 4
        if n_topics < 0 or n_topics > len(data):
            return None
        out: list[TP] = []
        for _ in range(n_topics):
            (ln,) = _I16.unpack_from(data, pos)
            pos += 2
            if ln < 0:
                return None
            topic = bytes(data[pos:pos + ln]).decode()
            pos += ln
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            if n < 0 or n * 4 > len(data) - pos:
                return None
            out.extend((topic, p) for p in struct.unpack_from(f">{n}i", data, pos))
            pos += 4 * n
        generation = DEFAULT_GENERATION
        if pos + 4 <= len(data):
            (generation,) = _I32.unpack_from(data, pos)
            pos += 4
        if pos != len(data):
            return None
        return out, generation
    except (struct.error, UnicodeDecodeError):
        return None


# --- assignors --------------------------------------------------------------------------------------

class Assignor:
    name = ""
    protocol = EAGER

    def subscription(self, topics: Iterable[str], owned: Iterable[TP], generation: int,
                     rack_id: str | None = None) -> bytes:
        """This member's JoinGroup protocol metadata."""
        owned = list(owned) if self.protocol == COOPERATIVE else []
        return encode_member_subscription(topics, owned=owned, generation=generation,
                                          rack_id=rack_id, user_data=self.user_data(owned, generation))

    def user_data(self, owned: list[TP], generation: int) -> bytes | None:
        return None

    def assign(self, members: list[MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TP]]:
        raise NotImplementedError

    def assign_encoded(self, members: list[MemberSubscription],
                       partitions_per_topic: dict[str, int]) -> dict[str, bytes]:
        result = self.assign(members, partitions_per_topic)
        return {m: encode_member_assignment(tps) for m, tps in result.items()}


def _sorted_members(members: list[MemberSubscription]) -> list[MemberSubscription]:
    return sorted(members, key=MemberSubscription.sort_key)


class RangeAssignor(Assignor):
    """Per topic: the sorted members subscribed to it each take a contiguous range of
    partitions; the first ``partitions % members`` take one more."""

    name = "range"

    def assign(self, members: list[MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TP]]:
        out: dict[str, list[TP]] = {m.member_id: [] for m in members}
        ordered = _sorted_members(members)
        for topic in sorted(partitions_per_topic):
            n = partitions_per_topic[topic]
            consumers = [m.member_id for m in ordered if topic in m.topics]
            if not consumers or n <= 0:
                continue
            per, extra = divmod(n, len(consumers))
            for i, member_id in enumerate(consumers):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                out[member_id].extend((topic, p) for p in range(start, start + length))
        return out


class RoundRobinAssignor(Assignor):
    """All partitions, sorted by (topic, partition), dealt in turn to the sorted members,
    skipping members not subscribed to the partition's topic."""

    name = "roundrobin"

    def assign(self, members: list[MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TP]]:
        out: dict[str, list[TP]] = {m.member_id: [] for m in members}
        ordered = _sorted_members(members)
        if not ordered:
            return out
        subs = [set(m.topics) for m in ordered]
        i = 0
        for topic in sorted(partitions_per_topic):
            if not any(topic in s for s in subs):
                continue
            for p in range(partitions_per_topic[topic]):
                while topic not in subs[i % len(ordered)]:
                    i += 1
                out[ordered[i % len(ordered)].member_id].append((topic, p))
                i += 1
        return out


class CooperativeStickyAssignor(Assignor):
    """Balanced and sticky, for the cooperative protocol (KIP-429).

    1. Each partition stays with the member that owned it in the newest generation claiming it
       (owned_partitions from the subscription; claims of older generations, of unsubscribed
       topics and double claims within one generation are dropped).
    2. Unowned partitions go, in (topic, partition) order, to the least loaded eligible member.
    3. While some partition's owner has at least two more partitions than another member
       subscribed to its topic, move one (newly assigned partitions first) to the least loaded.
       This ends: every move lowers the sum of squared loads.
    4. Cooperative step: a partition whose owner changes is left out of this round's
       assignment, so its current owner revokes it and rejoins; the next rebalance hands it
       to its new owner.
    """

    name = "cooperative-sticky"
    protocol = COOPERATIVE

    def user_data(self, owned: list[TP], generation: int) -> bytes | None:
        return encode_sticky_user_data(owned, generation)

    def assign(self, members: list[MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TP]]:
        ordered = _sorted_members(members)
        rank = {m.member_id: i for i, m in enumerate(ordered)}
        subs = {m.member_id: set(m.topics) for m in ordered}
        exists = {(t, p) for t, n in partitions_per_topic.items() for p in range(n)}
        wanted = sorted(tp for tp in exists if any(tp[0] in s for s in subs.values()))

        # 1. previous owners
        claims: dict[TP, tuple[int, str]] = {}
        contested: set[TP] = set()
        for m in ordered:
            owned, generation = m.owned_partitions, m.generation
            if m.user_data and (not owned or generation < 0):
                decoded = decode_sticky_user_data(m.user_data)
                if decoded is not None:
                    if not owned:
                        owned = tuple(decoded[0])
                    if generation < 0:
                        generation = decoded[1]
            for tp in owned:
                if tp not in exists or tp[0] not in subs[m.member_id]:
                    continue
                cur = claims.get(tp)
                if cur is None or generation > cur[0]:
                    claims[tp] = (generation, m.member_id)
                    contested.discard(tp)
                elif generation == cur[0] and cur[1] != m.member_id:
                    contested.add(tp)
        prev_owner = {tp: owner for tp, (_, owner) in claims.items() if tp not in contested}

        assignment: dict[str, list[TP]] = {m.member_id: [] for m in ordered}
        for tp in wanted:
            owner = prev_owner.get(tp)
            if owner is not None:
                assignment[owner].append(tp)

        # 2. unowned partitions to the least loaded eligible member
        for tp in wanted:
            if tp in prev_owner:
                continue
            eligible = [mid for mid in assignment if tp[0] in subs[mid]]
            target = min(eligible, key=lambda mid: (len(assignment[mid]), rank[mid]))
            assignment[target].append(tp)

        # 3. balance
        while True:
            moved = False
            for mid in sorted(assignment, key=lambda x: (-len(assignment[x]), rank[x])):
                load = len(assignment[mid])
                # candidates: newly assigned first (keep stickiness), then highest tp first
                cands = sorted(assignment[mid], key=lambda tp: (prev_owner.get(tp) == mid, tp),
                               reverse=False)
                for tp in cands:
                    eligible = [o for o in assignment if o != mid and tp[0] in subs[o]
                                and len(assignment[o]) < load - 1]
                    if eligible:
                        target = min(eligible, key=lambda o: (len(assignment[o]), rank[o]))
                        assignment[mid].remove(tp)
                        assignment[target].append(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                break

        # 4. cooperative: partitions changing owner wait for their owner to revoke them
        out: dict[str, list[TP]] = {}
        for mid, tps in assignment.items():
            out[mid] = sorted(tp for tp in tps if prev_owner.get(tp, mid) == mid)
        return out


ASSIGNORS: dict[str, type[Assignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def get_assignor(name: str) -> Assignor:
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"unknown partition assignor {name!r}") from None


def rebalance_protocol(assignors: list[Assignor]) -> str:
    """COOPERATIVE only if every configured assignor supports it (so any of them may be
    chosen by the group), else EAGER."""
    if assignors and all(a.protocol == COOPERATIVE for a in assignors):
        return COOPERATIVE
    return EAGER
