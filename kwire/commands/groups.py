"""``kwire groups`` and ``kwire offsets``: consumer groups as their coordinators see them.

::

    kwire groups -b localhost:9092                     every group (ListGroups on every broker)
    kwire groups -b localhost:9092 --describe orders   state, protocol, members, and each member's
                                                       subscription and assignment, decoded
                                                       (KIP-848 groups: ConsumerGroupDescribe, with
                                                       member epochs and target assignments)
    kwire offsets -b localhost:9092 --group orders     committed offset, log start, end, lag

Every request goes through :class:`kwire.admin.Admin`: a group's to its coordinator
(FindCoordinator), ListGroups to every broker, the log bounds to each partition's leader.  Member metadata and assignments
are the consumer protocol's embedded messages (ConsumerProtocolSubscription /
ConsumerProtocolAssignment); they are decoded when the group's protocol type is "consumer"
and shown raw (hex) otherwise.

The end of a partition is ListOffsets(latest), confirmed by a Fetch that reads nothing and
reports the high watermark -- the larger wins: Tansu 0.6 answers ListOffsets(latest) with the
last batch's base offset + 1, short of the end when batches hold several records.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..admin import Admin, GroupDescription, GroupMember
from ..errors import BrokerError, KwireError, ProtocolError, UnsupportedVersionError
from ..net.metadata import BrokerInfo
from ..protocol import api as P
from .cluster import open_admin, snapshot
from .common import CommandError, Out, add_common, add_format, cell, error_name, timeout_ms_of

_GROUP_ID_NOT_FOUND = 69


# --- requests to a group's coordinator -----------------------------------------------------------

class _Deadline:
    def __init__(self, timeout_ms: int):
        self.end = time.monotonic() + timeout_ms / 1000

    def left_ms(self) -> int:
        return max(1, int((self.end - time.monotonic()) * 1000))

    def passed(self) -> bool:
        return time.monotonic() >= self.end


def find_coordinator(admin: Admin, group: str, deadline: _Deadline) -> BrokerInfo:
    """The group's coordinator (Admin.find_coordinator retries while none is ready)."""
    try:
        node = admin.find_coordinator(group, timeout=deadline.left_ms() / 1000)
    except BrokerError as exc:
        raise CommandError(f"no coordinator for group {group!r}: {exc}") from None
    return BrokerInfo(node.id, node.host, node.port, node.rack)


def describe(admin: Admin, group: str, deadline: _Deadline) -> GroupDescription | KwireError:
    """The group as its coordinator describes it (Admin: DescribeGroups, or
    ConsumerGroupDescribe for a KIP-848 group); an error is returned, not raised."""
    return admin.describe_consumer_groups([group], timeout=deadline.left_ms() / 1000,
                                          raise_on_error=False)[group]


def group_exists(admin: Admin, group: str, desc: GroupDescription | KwireError,
                 deadline: _Deadline) -> bool | None:
    """Does the coordinator know ``group``?  None when it cannot say.

    Brokers answer DescribeGroups for an unknown group in different ways: GROUP_ID_NOT_FOUND
    (Kafka 4), state "Dead" (older Kafka), or an empty group with no protocol type (Tansu) --
    which is also what a group that only ever committed offsets looks like, so then ListGroups
    decides."""
    if isinstance(desc, GroupDescription):
        if desc.state == "Dead":
            return False
        if desc.members or desc.protocol_type or desc.type == "consumer":
            return True
    elif getattr(desc, "code", None) == _GROUP_ID_NOT_FOUND:
        return False
    listed = admin.list_groups(timeout=deadline.left_ms() / 1000)
    if any(g.group_id == group for g in listed.groups):
        return True
    coordinator = getattr(desc, "coordinator", None)
    if listed.errors and (coordinator is None or coordinator.id in listed.errors):
        return None if not isinstance(desc, GroupDescription) else False
    return False


def offset_fetch(admin: Admin, group: str, tps: list[tuple[str, int]] | None, deadline: _Deadline
                 ) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    """Committed offsets: {(topic, partition): (offset, metadata, error code)}; ``tps`` None
    asks for every partition the group committed."""
    try:
        got = admin.list_consumer_group_offsets(group, tps, timeout=deadline.left_ms() / 1000,
                                                raise_on_error=False)
    except BrokerError as exc:
        raise CommandError(f"committed offsets of group {group!r}: {exc}") from None
    return {tp: (-1, None, v.code) if isinstance(v, BrokerError) else (v.offset, v.metadata, 0)
            for tp, v in got.items()}


def log_bounds(admin: Admin, tps: list[tuple[str, int]], deadline: _Deadline
               ) -> dict[tuple[str, int], dict[str, Any]]:
    """Per partition: {"log_start", "end", "error"} (Admin.log_bounds: ListOffsets confirmed
    by a Fetch)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for tp, b in admin.log_bounds(tps, timeout=deadline.left_ms() / 1000, raise_on_error=False).items():
        if isinstance(b, BaseException):
            code = getattr(b, "code", None)
            out[tp] = {"log_start": None, "end": None,
                       "error": (error_name(code) if code is not None else None) or type(b).__name__}
        else:
            out[tp] = {"log_start": b.log_start, "end": b.end, "error": None}
    return out


# --- decoding members --------------------------------------------------------------------------

def _hex(data: bytes | bytearray | memoryview | None) -> str | None:
    return None if data is None else bytes(data).hex()


def decode_subscription(data: bytes) -> dict[str, Any]:
    version, v = P.decode_subscription(data)
    return {"version": version, "topics": list(v.get("topics") or []),
            "owned_partitions": [{"topic": o["topic"], "partitions": list(o["partitions"])}
                                 for o in v.get("owned_partitions") or []],
            "generation_id": v.get("generation_id", -1), "rack_id": v.get("rack_id"),
            "user_data": _hex(v.get("user_data"))}


def decode_assignment(data: bytes) -> dict[str, Any]:
    version, v = P.decode_assignment(data)
    return {"version": version,
            "partitions": [{"topic": a["topic"], "partitions": list(a["partitions"])}
                           for a in v.get("assigned_partitions") or []],
            "user_data": _hex(v.get("user_data"))}


def _decode(protocol_type: str, data: bytes | None,
            decoder: Callable[[bytes], dict[str, Any]]) -> dict[str, Any] | None:
    if not data:
        return None
    if protocol_type != "consumer":
        return {"raw": bytes(data).hex()}
    try:
        return decoder(bytes(data))
    except KwireError as exc:
        return {"error": str(exc), "raw": bytes(data).hex()}


def member_json(protocol_type: str, m: GroupMember) -> dict[str, Any]:
    return {
        "member_id": m.member_id, "group_instance_id": m.group_instance_id,
        "client_id": m.client_id, "client_host": m.client_host,
        "subscription": _decode(protocol_type, m.metadata, decode_subscription),
        "assignment": _decode(protocol_type, m.assignment_data, decode_assignment),
    }


def _tps_text(entries: Iterable[dict[str, Any]]) -> str:
    """'t:0,1;u:3' for a list of {"topic", "partitions"}: one cell, no spaces."""
    return ";".join(f"{e['topic']}:{cell(sorted(e['partitions']))}" for e in entries) or "-"


# --- kwire groups ----------------------------------------------------------------------------------

def add_groups(p: argparse.ArgumentParser) -> None:
    p.add_argument("--describe", metavar="GROUP",
                   help="state, protocol and members of GROUP, with subscriptions and assignments decoded")
    add_format(p)
    add_common(p)


def run_groups(args: argparse.Namespace) -> int:
    deadline = _Deadline(timeout_ms_of(args))
    admin, plog = open_admin(args)
    with plog, admin:
        if args.describe is not None:
            return _describe(args, admin, deadline)
        listed = admin.list_groups(timeout=deadline.left_ms() / 1000)
        every_broker_failed = len(listed.errors) == len(admin.network.metadata.brokers)
    if listed.errors and every_broker_failed:
        raise next(iter(listed.errors.values()))
    for node, exc in sorted(listed.errors.items()):
        print(f"kwire groups: broker {node}: {exc}", file=sys.stderr)
    found = {g.group_id: {"group": g.group_id, "protocol_type": g.protocol_type,
                          "state": g.state or None, "group_type": g.type or None,
                          "coordinator": g.coordinator_id} for g in listed.groups}
    groups = [found[k] for k in sorted(found)]
    out = Out()
    if args.format == "json":
        out.json(groups)
    else:
        out.table(["group", "protocol type", "state", "type", "coordinator"],
                  [[g["group"], g["protocol_type"], g["state"], g["group_type"], g["coordinator"]]
                   for g in groups], right=("coordinator",))
    return 1 if listed.errors else 0


def _describe(args: argparse.Namespace, admin: Admin, deadline: _Deadline) -> int:
    group = args.describe
    coordinator = find_coordinator(admin, group, deadline)
    desc = describe(admin, group, deadline)
    if isinstance(desc, UnsupportedVersionError):
        raise CommandError(f"the coordinator of group {group!r} (node {coordinator.node_id}) "
                           "does not support DescribeGroups")
    if isinstance(desc, KwireError) and getattr(desc, "code", None) != _GROUP_ID_NOT_FOUND:
        raise CommandError(f"group {group!r}: {desc}")
    if not isinstance(desc, GroupDescription) or not group_exists(admin, group, desc, deadline):
        raise CommandError(f"group {group!r} not found")
    if desc.type == "consumer":
        return _describe_kip848(args, group, coordinator, desc)
    ptype = desc.protocol_type
    members = [member_json(ptype, m) for m in desc.members]
    result = {"group": group, "state": desc.state, "protocol_type": ptype,
              "protocol": desc.protocol or None,
              "coordinator": {"node_id": coordinator.node_id, "host": coordinator.host, "port": coordinator.port},
              "members": members}
    out = Out()
    if args.format == "json":
        out.json(result)
        return 0
    proto = "/".join(x for x in (ptype, desc.protocol) if x) or "-"
    out.line(f"group {group}  state {desc.state}  protocol {proto}  coordinator "
             f"{coordinator.node_id} ({coordinator.address})  members {len(members)}")
    if not members:
        return 0
    out.line()
    rows = []
    for m in members:
        sub, asg = m["subscription"] or {}, m["assignment"] or {}
        rows.append([m["member_id"], m["client_id"], m["client_host"], m["group_instance_id"],
                     cell(sub.get("topics")) if "topics" in sub else _raw_cell(sub),
                     _tps_text(sub.get("owned_partitions", [])) if sub else "-",
                     _tps_text(asg["partitions"]) if "partitions" in asg else _raw_cell(asg)])
    out.table(["member", "client id", "host", "instance", "subscribed", "owned", "assigned"], rows)
    if all(m["subscription"] is None and m["assignment"] is None for m in members):
        out.line("(the coordinator sent no member metadata or assignments)")
    return 0


def _assignment_json(tps: tuple[tuple[str, int], ...], topic_ids: dict[str, str]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return [{"topic": t, "topic_id": topic_ids.get(t), "partitions": sorted(ps)}
            for t, ps in sorted(by_topic.items())]


def _describe_kip848(args: argparse.Namespace, group: str, coordinator: BrokerInfo, g: GroupDescription) -> int:
    """A KIP-848 group (ConsumerGroupDescribe): epochs, the assignor the broker runs, and each
    member's subscription, current assignment and target assignment."""
    ids = dict(g.topic_ids)
    members: list[dict[str, Any]] = [{
        "member_id": m.member_id, "group_instance_id": m.group_instance_id,
        "rack_id": m.rack_id, "member_epoch": m.member_epoch,
        "client_id": m.client_id, "client_host": m.client_host,
        "subscribed_topics": list(m.subscribed_topics),
        "subscribed_regex": m.subscribed_regex,
        "assignment": _assignment_json(m.assignment, ids),
        "target_assignment": _assignment_json(m.target_assignment, ids),
        "member_type": m.member_type,
    } for m in g.members]
    result = {"group": group, "state": g.state, "protocol_type": "consumer",
              "group_protocol": "consumer", "assignor": g.protocol or None,
              "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
              "coordinator": {"node_id": coordinator.node_id, "host": coordinator.host,
                              "port": coordinator.port},
              "members": members}
    out = Out()
    if args.format == "json":
        out.json(result)
        return 0
    out.line(f"group {group}  state {g.state}  protocol consumer (KIP-848)  assignor "
             f"{g.protocol or '-'}  group epoch {g.group_epoch}  assignment epoch "
             f"{g.assignment_epoch}  coordinator {coordinator.node_id} ({coordinator.address})  "
             f"members {len(members)}")
    if not members:
        return 0
    out.line()
    rows = []
    for m in members:
        subscribed = m["subscribed_regex"] and f"/{m['subscribed_regex']}/" or cell(m["subscribed_topics"])
        target = _tps_text(m["target_assignment"])
        rows.append([m["member_id"], m["member_epoch"], m["client_id"], m["client_host"],
                     m["group_instance_id"], subscribed, _tps_text(m["assignment"]),
                     "=" if m["target_assignment"] == m["assignment"] else target])
    out.table(["member", "epoch", "client id", "host", "instance", "subscribed", "assigned",
               "target"], rows, right=("epoch",))
    out.line("(target \"=\": the member owns its target assignment)")
    return 0


def _raw_cell(decoded: dict[str, Any]) -> str:
    if not decoded:
        return "-"
    if "error" in decoded:
        return f"undecodable ({len(decoded['raw']) // 2} B)"
    return f"raw ({len(decoded['raw']) // 2} B)"


# --- kwire offsets ---------------------------------------------------------------------------------

def add_offsets(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--group", required=True, help="the consumer group")
    p.add_argument("-t", "--topic", action="append", metavar="TOPIC",
                   help="only this topic, every partition, committed or not (repeatable; "
                        "default: the partitions the group committed)")
    add_format(p)
    add_common(p)


def run_offsets(args: argparse.Namespace) -> int:
    deadline = _Deadline(timeout_ms_of(args))
    group = args.group
    admin, plog = open_admin(args)
    with plog, admin:
        topics_snap = snapshot(admin, args, args.topic) if args.topic else None
        coordinator = find_coordinator(admin, group, deadline)
        node = coordinator.node_id
        wanted = None
        if topics_snap is not None:
            wanted = [(t, p) for t in sorted(args.topic) for p in sorted(topics_snap.topics[t].partitions)]
        try:
            committed = offset_fetch(admin, group, wanted, deadline)
        except ProtocolError:
            if wanted is not None:
                raise
            # librdkafka's mock cluster answers "every topic" with a null list, which the spec
            # does not allow: ask for every topic of the cluster by name instead.
            every = [(t, p) for t, i in sorted(admin.list_topics(None, timeout=args.timeout).topics.items())
                     if i.partitions and not i.is_internal for p in sorted(i.partitions)]
            committed = {tp: v for tp, v in offset_fetch(admin, group, every, deadline).items()
                         if v[0] >= 0} if every else {}
        desc = describe(admin, group, deadline)
        if not any(off >= 0 for off, _, _ in committed.values()):
            exists = group_exists(admin, group, desc, deadline)
            if exists is False:
                raise CommandError(f"group {group!r} not found")
            if exists is None and wanted is None:
                raise CommandError(f"group {group!r} has no committed offsets (and the broker cannot "
                                   "describe groups)")
        tps = wanted if wanted is not None else sorted(committed)
        bounds = log_bounds(admin, tps, deadline) if tps else {}
    owners = _owners(desc)
    rows = []
    total = 0
    for tp in tps:
        off, meta, code = committed.get(tp, (-1, None, 0))
        b = bounds.get(tp, {})
        end = b.get("end")
        lag = end - off if off is not None and off >= 0 and end is not None else None
        if lag is not None:
            total += max(0, lag)
        owner = owners.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "committed": off if off >= 0 else None,
                     "metadata": meta or None, "log_start": b.get("log_start"), "end": end, "lag": lag,
                     "member_id": owner["member_id"] if owner else None,
                     "client_id": owner["client_id"] if owner else None,
                     "error": error_name(code) or b.get("error")})
    state = desc.state if isinstance(desc, GroupDescription) else None
    # Lag needs a committed offset: partitions without one have no lag (as Kafka's
    # kafka-consumer-groups shows "-"), and a group with none has no total either.
    uncommitted = sum(1 for r in rows if r["committed"] is None)
    total_lag = total if uncommitted < len(rows) else None
    out = Out()
    if args.format == "json":
        out.json({"group": group, "coordinator": node, "state": state, "total_lag": total_lag,
                  "partitions_without_commit": uncommitted, "partitions": rows})
        return 0
    lag_text = "-" if total_lag is None else str(total_lag)
    if uncommitted and rows:
        lag_text += f" ({uncommitted} of {len(rows)} partitions have no committed offset)"
    out.line(f"group {group}  coordinator {node} ({coordinator.address})  state {state or '-'}  "
             f"total lag {lag_text}")
    if not rows:
        out.line("(no committed offsets: --topic TOPIC shows a topic's partitions all the same)")
        return 0
    out.line()
    # (as Kafka's kafka-consumer-groups: the member id and the client id, which members may share)
    out.table(["topic", "partition", "committed", "log start", "end", "lag", "member", "client id", "error"],
              [[r["topic"], r["partition"], r["committed"], r["log_start"], r["end"], r["lag"],
                r["member_id"], r["client_id"], r["error"]] for r in rows],
              right=("partition", "committed", "log start", "end", "lag"))
    return 0


def _owners(desc: GroupDescription | KwireError) -> dict[tuple[str, int], dict[str, Any]]:
    """Which member each partition is assigned to (classic: the decoded assignments; KIP-848:
    the members' current assignments)."""
    owners: dict[tuple[str, int], dict[str, Any]] = {}
    if not isinstance(desc, GroupDescription):
        return owners
    for m in desc.members:
        for tp in m.assignment:
            owners[tp] = {"member_id": m.member_id, "client_id": m.client_id or None}
    return owners
