"""``kwire groups`` and ``kwire offsets``: consumer groups as their coordinators see them.

::

    kwire groups -b localhost:9092                     every group (ListGroups on every broker)
    kwire groups -b localhost:9092 --describe orders   state, protocol, members, and each member's
                                                       subscription and assignment, decoded
                                                       (KIP-848 groups: ConsumerGroupDescribe, with
                                                       member epochs and target assignments)
    kwire offsets -b localhost:9092 --group orders     committed offset, log start, end, lag

A group's requests go to its coordinator (FindCoordinator).  Member metadata and assignments
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

from ..admin import Admin
from ..errors import BrokerError, KwireError, ProtocolError, UnsupportedVersionError, for_code
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


def describe_group(net, node: int, group: str, deadline: _Deadline) -> dict | None:
    """The DescribeGroups entry for ``group``; None when the broker has no DescribeGroups."""
    try:
        resp = net.request(node, "DescribeGroups", {"groups": [group], "include_authorized_operations": False},
                           deadline.left_ms())
    except UnsupportedVersionError:
        return None
    for g in resp["groups"]:
        if g["group_id"] == group:
            return g
    raise CommandError(f"DescribeGroups answered without group {group!r}")


def describe_consumer_group(net, node: int, group: str, deadline: _Deadline) -> dict | None:
    """The ConsumerGroupDescribe entry for a KIP-848 group; None when the coordinator has no
    ConsumerGroupDescribe, or ``group`` is not such a group (a classic one, or none)."""
    try:
        resp = net.request(node, "ConsumerGroupDescribe",
                           {"group_ids": [group], "include_authorized_operations": False},
                           deadline.left_ms())
    except UnsupportedVersionError:
        return None
    for g in resp["groups"]:
        if g["group_id"] == group:
            # (GROUP_ID_NOT_FOUND: no such group, or a classic one -- DescribeGroups says which)
            if g["error_code"] == _GROUP_ID_NOT_FOUND:
                return None
            if g["error_code"]:
                raise CommandError(f"group {group!r}: {for_code(g['error_code'], g.get('error_message'))}")
            return g
    raise CommandError(f"ConsumerGroupDescribe answered without group {group!r}")


def listed_groups(net, node: int, deadline: _Deadline) -> list[dict] | None:
    """ListGroups on one broker; None when it has no ListGroups."""
    try:
        resp = net.request(node, "ListGroups", {"states_filter": [], "types_filter": []}, deadline.left_ms())
    except UnsupportedVersionError:
        return None
    if resp.get("error_code"):
        raise for_code(resp["error_code"], f"ListGroups on node {node}")
    return resp["groups"]


def group_exists(net, node: int, group: str, desc: dict | None, deadline: _Deadline) -> bool | None:
    """Does the coordinator know ``group``?  None when it cannot say.

    Brokers answer DescribeGroups for an unknown group in different ways: GROUP_ID_NOT_FOUND
    (Kafka 4), state "Dead" (older Kafka), or an empty group with no protocol type (Tansu) --
    which is also what a group that only ever committed offsets looks like, so then ListGroups
    on the coordinator decides."""
    if desc is not None:
        if desc["error_code"] == _GROUP_ID_NOT_FOUND or desc["group_state"] == "Dead":
            return False
        if desc["error_code"] == 0 and (desc["members"] or desc["protocol_type"]):
            return True
    listed = listed_groups(net, node, deadline)
    if listed is None:
        return None if desc is None else False
    return any(g["group_id"] == group for g in listed)


def offset_fetch(net, node: int, group: str, topics: dict[str, list[int]] | None,
                 deadline: _Deadline) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    """Committed offsets: {(topic, partition): (offset, metadata, error code)}; ``topics`` None
    asks for every partition the group committed."""
    wanted = None if topics is None else [{"name": t, "partition_indexes": ps} for t, ps in sorted(topics.items())]
    body = {"group_id": group, "topics": wanted, "require_stable": False,
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": wanted}]}
    # v10 names topics by id only; v2 is the first to take a null topic list ("all").
    f = net.send(node, "OffsetFetch", body, max_version=9, min_version=2 if wanted is None else None,
                 timeout_ms=deadline.left_ms())
    resp = net.wait(f).result()
    if resp.get("groups"):
        g = next((g for g in resp["groups"] if g["group_id"] == group), resp["groups"][0])
        entries, code = g.get("topics") or [], g.get("error_code", 0)
    else:
        entries, code = resp.get("topics") or [], resp.get("error_code", 0)
    if code:
        raise CommandError(f"committed offsets of group {group!r}: {for_code(code)}")
    out = {}
    for t in entries:
        for p in t["partitions"]:
            out[(t["name"], p["partition_index"])] = (p["committed_offset"], p.get("metadata"), p["error_code"])
    return out


def log_bounds(admin: Admin, tps: list[tuple[str, int]], deadline: _Deadline
               ) -> dict[tuple[str, int], dict]:
    """Per partition: {"log_start", "end", "error"} (Admin.log_bounds: ListOffsets confirmed
    by a Fetch)."""
    out: dict[tuple[str, int], dict] = {}
    for tp, b in admin.log_bounds(tps, timeout=deadline.left_ms() / 1000, raise_on_error=False).items():
        if isinstance(b, BaseException):
            code = getattr(b, "code", None)
            out[tp] = {"log_start": None, "end": None,
                       "error": (error_name(code) if code is not None else None) or type(b).__name__}
        else:
            out[tp] = {"log_start": b.log_start, "end": b.end, "error": None}
    return out


# --- decoding members --------------------------------------------------------------------------

def _hex(data) -> str | None:
    return None if data is None else bytes(data).hex()


def decode_subscription(data: bytes) -> dict:
    version, v = P.decode_subscription(data)
    return {"version": version, "topics": list(v.get("topics") or []),
            "owned_partitions": [{"topic": o["topic"], "partitions": list(o["partitions"])}
                                 for o in v.get("owned_partitions") or []],
            "generation_id": v.get("generation_id", -1), "rack_id": v.get("rack_id"),
            "user_data": _hex(v.get("user_data"))}


def decode_assignment(data: bytes) -> dict:
    version, v = P.decode_assignment(data)
    return {"version": version,
            "partitions": [{"topic": a["topic"], "partitions": list(a["partitions"])}
                           for a in v.get("assigned_partitions") or []],
            "user_data": _hex(v.get("user_data"))}


def _decode(protocol_type: str, data: bytes, decoder) -> dict | None:
    if not data:
        return None
    if protocol_type != "consumer":
        return {"raw": bytes(data).hex()}
    try:
        return decoder(bytes(data))
    except KwireError as exc:
        return {"error": str(exc), "raw": bytes(data).hex()}


def member_json(protocol_type: str, m: dict) -> dict:
    return {
        "member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
        "client_id": m["client_id"], "client_host": m["client_host"],
        "subscription": _decode(protocol_type, m["member_metadata"], decode_subscription),
        "assignment": _decode(protocol_type, m["member_assignment"], decode_assignment),
    }


def _tps_text(entries) -> str:
    """'t:0,1;u:3' for a list of {"topic", "partitions"}: one cell, no spaces."""
    return ";".join(f"{e['topic']}:{cell(sorted(e['partitions']))}" for e in entries) or "-"


# --- kwire groups ----------------------------------------------------------------------------------

def add_groups(p: argparse.ArgumentParser) -> None:
    p.add_argument("--describe", metavar="GROUP",
                   help="state, protocol and members of GROUP, with subscriptions and assignments decoded")
    add_format(p)
    add_common(p)


def run_groups(args) -> int:
    deadline = _Deadline(timeout_ms_of(args))
    admin, plog = open_admin(args)
    with plog, admin:
        net = admin.network
        if args.describe is not None:
            return _describe(args, admin, deadline)
        snap = snapshot(admin, args, [])
        found: dict[str, dict] = {}
        failures = []
        pending = [(node, net.send(node, "ListGroups", {"states_filter": [], "types_filter": []},
                                   timeout_ms=deadline.left_ms())) for node in sorted(snap.brokers)]
        for node, f in pending:
            try:
                resp = net.wait(f).result()
                if resp.get("error_code"):
                    raise for_code(resp["error_code"])
            except KwireError as exc:
                failures.append((node, exc))
                continue
            for g in resp["groups"]:
                found.setdefault(g["group_id"], {
                    "group": g["group_id"], "protocol_type": g["protocol_type"],
                    "state": g.get("group_state") or None, "group_type": g.get("group_type") or None,
                    "coordinator": node})
    if failures and len(failures) == len(pending):
        raise failures[0][1]
    for node, exc in failures:
        print(f"kwire groups: broker {node}: {exc}", file=sys.stderr)
    groups = [found[k] for k in sorted(found)]
    out = Out()
    if args.format == "json":
        out.json(groups)
    else:
        out.table(["group", "protocol type", "state", "type", "coordinator"],
                  [[g["group"], g["protocol_type"], g["state"], g["group_type"], g["coordinator"]]
                   for g in groups], right=("coordinator",))
    return 1 if failures else 0


def _describe(args, admin: Admin, deadline: _Deadline) -> int:
    group = args.describe
    net = admin.network
    net.refresh_metadata([], deadline.left_ms())
    coordinator = find_coordinator(admin, group, deadline)
    desc = describe_group(net, coordinator.node_id, group, deadline)
    classic = desc is not None and desc["error_code"] == 0 and bool(desc["members"] or desc["protocol_type"])
    if not classic:
        # (Kafka answers DescribeGroups for a KIP-848 group with GROUP_ID_NOT_FOUND; Tansu
        # answers ConsumerGroupDescribe for any group, empty: a group with no epoch is none)
        kip848 = describe_consumer_group(net, coordinator.node_id, group, deadline)
        if kip848 is not None and (kip848["members"] or kip848["group_epoch"] > 0):
            return _describe_kip848(args, group, coordinator, kip848)
    if desc is None:
        raise CommandError(f"the coordinator of group {group!r} (node {coordinator.node_id}) "
                           "does not support DescribeGroups")
    if desc["error_code"] and desc["error_code"] != _GROUP_ID_NOT_FOUND:
        raise CommandError(f"group {group!r}: {for_code(desc['error_code'], desc.get('error_message'))}")
    if not group_exists(net, coordinator.node_id, group, desc, deadline):
        raise CommandError(f"group {group!r} not found")
    ptype = desc["protocol_type"]
    members = [member_json(ptype, m) for m in desc["members"]]
    result = {"group": group, "state": desc["group_state"], "protocol_type": ptype,
              "protocol": desc["protocol_data"] or None,
              "coordinator": {"node_id": coordinator.node_id, "host": coordinator.host, "port": coordinator.port},
              "members": members}
    out = Out()
    if args.format == "json":
        out.json(result)
        return 0
    proto = "/".join(x for x in (ptype, desc["protocol_data"]) if x) or "-"
    out.line(f"group {group}  state {desc['group_state']}  protocol {proto}  coordinator "
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


def _assignment_json(a: dict | None) -> list[dict]:
    return [{"topic": t["topic_name"], "topic_id": str(t["topic_id"]),
             "partitions": sorted(t["partitions"])}
            for t in sorted((a or {}).get("topic_partitions", ()), key=lambda t: t["topic_name"])]


def _describe_kip848(args, group: str, coordinator: BrokerInfo, g: dict) -> int:
    """A KIP-848 group (ConsumerGroupDescribe): epochs, the assignor the broker runs, and each
    member's subscription, current assignment and target assignment."""
    members = [{
        "member_id": m["member_id"], "group_instance_id": m.get("instance_id"),
        "rack_id": m.get("rack_id"), "member_epoch": m["member_epoch"],
        "client_id": m["client_id"], "client_host": m["client_host"],
        "subscribed_topics": sorted(m.get("subscribed_topic_names") or ()),
        "subscribed_regex": m.get("subscribed_topic_regex") or None,
        "assignment": _assignment_json(m.get("assignment")),
        "target_assignment": _assignment_json(m.get("target_assignment")),
        "member_type": {0: "classic", 1: "consumer"}.get(m.get("member_type", -1)),
    } for m in sorted(g["members"], key=lambda m: m["member_id"])]
    result = {"group": group, "state": g["group_state"], "protocol_type": "consumer",
              "group_protocol": "consumer", "assignor": g["assignor_name"] or None,
              "group_epoch": g["group_epoch"], "assignment_epoch": g["assignment_epoch"],
              "coordinator": {"node_id": coordinator.node_id, "host": coordinator.host,
                              "port": coordinator.port},
              "members": members}
    out = Out()
    if args.format == "json":
        out.json(result)
        return 0
    out.line(f"group {group}  state {g['group_state']}  protocol consumer (KIP-848)  assignor "
             f"{g['assignor_name'] or '-'}  group epoch {g['group_epoch']}  assignment epoch "
             f"{g['assignment_epoch']}  coordinator {coordinator.node_id} ({coordinator.address})  "
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


def _raw_cell(decoded: dict) -> str:
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


def run_offsets(args) -> int:
    deadline = _Deadline(timeout_ms_of(args))
    group = args.group
    admin, plog = open_admin(args)
    with plog, admin:
        net = admin.network
        topics_snap = snapshot(admin, args, args.topic) if args.topic else None
        coordinator = find_coordinator(admin, group, deadline)
        node = coordinator.node_id
        wanted = None
        if topics_snap is not None:
            wanted = {t: sorted(topics_snap.topics[t].partitions) for t in args.topic}
        try:
            committed = offset_fetch(net, node, group, wanted, deadline)
        except ProtocolError:
            if wanted is not None:
                raise
            # librdkafka's mock cluster answers "every topic" with a null list, which the spec
            # does not allow: ask for every topic of the cluster by name instead.
            every = {t: sorted(i.partitions) for t, i in admin.list_topics(None, timeout=args.timeout).topics.items()
                     if i.partitions and not i.is_internal}
            committed = {tp: v for tp, v in offset_fetch(net, node, group, every, deadline).items()
                         if v[0] >= 0} if every else {}
        try:
            desc = describe_group(net, node, group, deadline)
        except BrokerError:
            desc = None
        if not any(off >= 0 for off, _, _ in committed.values()):
            exists = group_exists(net, node, group, desc, deadline)
            if exists is False:
                raise CommandError(f"group {group!r} not found")
            if exists is None and wanted is None:
                raise CommandError(f"group {group!r} has no committed offsets (and the broker cannot "
                                   "describe groups)")
        if wanted is not None:
            tps = [(t, p) for t, ps in sorted(wanted.items()) for p in ps]
        else:
            tps = sorted(committed)
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
    state = desc["group_state"] if desc is not None and not desc["error_code"] else None
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
    out.table(["topic", "partition", "committed", "log start", "end", "lag", "member", "error"],
              [[r["topic"], r["partition"], r["committed"], r["log_start"], r["end"], r["lag"],
                r["client_id"] or r["member_id"], r["error"]] for r in rows],
              right=("partition", "committed", "log start", "end", "lag"))
    return 0


def _owners(desc: dict | None) -> dict[tuple[str, int], dict]:
    """Which member each partition is assigned to, from the decoded assignments."""
    owners = {}
    if desc is None or desc.get("error_code"):
        return owners
    for m in desc["members"]:
        asg = _decode(desc["protocol_type"], m["member_assignment"], decode_assignment)
        for e in (asg or {}).get("partitions", []):
            for p in e["partitions"]:
                owners[(e["topic"], p)] = {"member_id": m["member_id"], "client_id": m["client_id"] or None}
    return owners

