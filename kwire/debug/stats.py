"""``kwire decode --stats``: a capture in numbers.

* per API and version: requests, responses, frames that did not decode;
* errors by name: every non-zero ``error_code`` in a response (or request) body, counted once
  per occurrence (a Fetch response with three partitions in error counts three), with the APIs
  that carried it;
* round-trip times per broker and API: count, p50, p90, p99, max (nearest rank, milliseconds);
* bytes and records per topic-partition, produced (Produce requests) and fetched (Fetch
  responses), from the record batches' headers (the bytes as on the wire, compressed);
* per group, a timeline: JoinGroup (member, generation, leader, protocol), SyncGroup (the
  partitions assigned), rebalances (REBALANCE_IN_PROGRESS, a new generation), OffsetCommit
  (offsets per partition), LeaveGroup; and per member a roll-up of the same.

:func:`capture_stats` returns one JSON-friendly dict; :func:`stats_lines` the text for people.
"""
from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import KwireError
from ..protocol import api as P
from .names import error_name, errors_in
from .render import _walk_entries, format_ts
from .select import groups_in

if TYPE_CHECKING:
    from ..protocol.api import Body
    from .capture import Item

__all__ = ["capture_stats", "stats_lines", "percentile"]

_PRODUCE, _FETCH, _OFFSET_COMMIT, _HEARTBEAT, _JOIN, _LEAVE, _SYNC = 0, 1, 8, 12, 11, 13, 14
_GROUP_APIS = {_OFFSET_COMMIT, 9, 10, _JOIN, _HEARTBEAT, _LEAVE, _SYNC, 15, 16, 42, 47, 68}
_REBALANCE_IN_PROGRESS = 27

TopicNames = dict[uuid.UUID, str]  # topic id -> name, from the capture's Metadata answers
RecordsData = bytes | memoryview  # a records field as decoded


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _body(item: Item) -> Body | None:
    if item.body is not None:
        return item.body
    partial = item.partial
    return partial.body if partial is not None else None


def _records_of(data: RecordsData | None) -> tuple[int, int]:
    if data is None:
        return 0, 0
    entries, _ = _walk_entries(bytes(data))
    return len(data), sum(e["count"] for e in entries)


def _topic_partitions(item: Item, topic_names: TopicNames
                      ) -> Iterator[tuple[str, int | None, RecordsData | None]]:
    """(topic, partition, records bytes) of a Produce request or a Fetch response."""
    body = item.body or {}
    if item.api_key == _PRODUCE and item.kind == "request":
        for t in body.get("topic_data") or ():
            name = t.get("name") or topic_names.get(t.get("topic_id")) or str(t.get("topic_id"))
            for p in t.get("partition_data") or ():
                yield name, p.get("index"), p.get("records")
    elif item.api_key == _FETCH and item.kind == "response":
        for t in body.get("responses") or ():
            name = t.get("topic") or topic_names.get(t.get("topic_id")) or str(t.get("topic_id"))
            for p in t.get("partitions") or ():
                yield name, p.get("partition_index"), p.get("records")


def _assignment(raw: RecordsData | None) -> list[str]:
    if not raw:
        return []
    try:
        _, value = P.decode_assignment(raw)
    except KwireError:
        return [f"<{len(raw)} bytes, not a consumer assignment>"]
    return [f"{t['topic']}-{p}" for t in value.get("assigned_partitions") or () for p in t.get("partitions") or ()]


def _timeline_event(item: Item, topic_names: TopicNames) -> tuple[str, str, dict[str, Any]] | None:
    """(member, what happened, details) of one group frame, or None for those not shown."""
    body = _body(item) or {}
    req = item if item.kind == "request" else item.request
    rbody = (req.body if req is not None else None) or {}
    key = item.api_key
    err = [error_name(c) for c in errors_in(body)] if item.kind != "request" else []
    member = body.get("member_id") or rbody.get("member_id") or ""
    if key == _JOIN:
        if item.kind == "request":
            protos = [p.get("name") for p in body.get("protocols") or ()]
            return member or "(new member)", "JoinGroup request", {"protocols": protos}
        d: dict[str, Any] = {"generation_id": body.get("generation_id"), "leader": body.get("leader"),
             "protocol": body.get("protocol_name")}
        if body.get("members"):
            d["members"] = [m.get("member_id") for m in body["members"]]
        if err:
            d["errors"] = err
        what = "joined" if not err else "join failed"
        if not err and body.get("leader") == body.get("member_id"):
            what += " (leader)"
        return body.get("member_id") or member, what, d
    if key == _SYNC:
        if item.kind == "request":
            d = {"generation_id": body.get("generation_id")}
            if body.get("assignments"):
                d["assigns"] = {a.get("member_id"): _assignment(a.get("assignment")) for a in body["assignments"]}
            return member, "SyncGroup request", d
        d = {"generation_id": rbody.get("generation_id"), "assigned": _assignment(body.get("assignment"))}
        if err:
            d["errors"] = err
        return member, "assigned" if not err else "sync failed", d
    if key == _HEARTBEAT and item.kind != "request" and err:
        return member, "rebalance" if "REBALANCE_IN_PROGRESS" in err else "heartbeat failed", {"errors": err}
    if key == _OFFSET_COMMIT:
        if item.kind == "request":
            # OffsetCommit v10+ names topics by id: the capture's Metadata answers name them
            offsets = {f"{_topic_name(t, topic_names)}-{p.get('partition_index')}": p.get("committed_offset")
                       for t in body.get("topics") or () for p in t.get("partitions") or ()}
            return member, "commit", {"generation_id": body.get("generation_id_or_member_epoch",
                                                                 body.get("generation_id")), "offsets": offsets}
        return (member, "commit failed", {"errors": err}) if err else None
    if key == _LEAVE and item.kind == "request":
        members = [m.get("member_id") for m in body.get("members") or ()] or [member]
        return ", ".join(m for m in members if m), "leave", {}
    return None


def _topic_name(t: Body, topic_names: TopicNames) -> str:
    """A topic entry's name: its own, or the name its topic id has in the capture."""
    name: str | None = t.get("name") or t.get("topic")
    if name:
        return name
    tid = t.get("topic_id")
    if tid is None:
        return "?"
    return topic_names.get(tid) or f"topic id {tid}"


def capture_stats(items: Iterable[Item], topic_names: TopicNames | None = None) -> dict[str, Any]:
    topic_names = topic_names or {}
    apis: dict[str, dict[str, Any]] = {}
    errors: dict[str, dict[str, Any]] = {}
    rtts: dict[tuple[str | None, str | None], list[float]] = {}  # (broker, api) -> round trips
    tps: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}  # group -> its timeline
    for i in items:
        if i.kind not in ("request", "response", "undecoded") or (i.kind == "undecoded" and i.api is None):
            continue
        k = f"{i.api or 'api ' + str(i.api_key)} v{i.version}"
        a = apis.setdefault(k, {"api": i.api, "api_key": i.api_key, "version": i.version,
                                "requests": 0, "responses": 0, "undecoded": 0})
        a["requests" if i.kind == "request" else "responses" if i.kind == "response" else "undecoded"] += 1
        body = _body(i)
        for code in errors_in(body):
            e = errors.setdefault(error_name(code), {"error_code": code, "count": 0, "apis": {}})
            e["count"] += 1
            e["apis"][i.api] = e["apis"].get(i.api, 0) + 1
        if i.kind == "response" and i.rtt_ms is not None:
            rtts.setdefault((i.broker, i.api), []).append(i.rtt_ms)
        if i.kind in ("request", "response") and i.api_key in (_PRODUCE, _FETCH):
            for topic, partition, data in _topic_partitions(i, topic_names):
                nbytes, nrec = _records_of(data)
                if not nbytes:
                    continue
                t = tps.setdefault(f"{topic}-{partition}", {"topic": topic, "partition": partition,
                                                            "produced_bytes": 0, "produced_records": 0,
                                                            "fetched_bytes": 0, "fetched_records": 0})
                what = "produced" if i.api_key == _PRODUCE else "fetched"
                t[f"{what}_bytes"] += nbytes
                t[f"{what}_records"] += nrec
        if i.api_key in _GROUP_APIS and i.kind in ("request", "response", "undecoded"):
            req = i if i.kind == "request" else i.request
            names = groups_in(_body(req), i.api_key) if req is not None else set()
            ev = _timeline_event(i, topic_names) if names else None
            if ev is None:
                continue
            member, what, detail = ev
            for g in sorted(names):
                groups.setdefault(g, []).append({
                    "time": format_ts(i.ts, date=True), "packet": i.packet, "client_id": (req.client_id if req else None),
                    "member": member, "event": what, **{k: v for k, v in detail.items() if v is not None}})
    rtt_out: list[dict[str, Any]] = []
    for (broker, api), values in sorted(rtts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        values.sort()
        rtt_out.append({"broker": broker, "api": api, "count": len(values),
                        "p50_ms": percentile(values, 50), "p90_ms": percentile(values, 90),
                        "p99_ms": percentile(values, 99), "max_ms": values[-1]})
    group_out: dict[str, dict[str, Any]] = {}
    for g, timeline in groups.items():
        members: dict[str, dict[str, Any]] = {}
        generations: set[int | None] = set()
        for e in timeline:
            m = members.setdefault(e["member"] or "(new member)", {"client_id": e["client_id"], "joins": 0,
                                                         "generations": [], "assignments": 0,
                                                         "commits": 0, "rebalances": 0, "left": False})
            if e["event"].startswith("joined"):
                m["joins"] += 1
                gen = e.get("generation_id")
                generations.add(gen)
                if gen not in m["generations"]:
                    m["generations"].append(gen)
            elif e["event"] == "assigned":
                m["assignments"] += 1
            elif e["event"] == "commit":
                m["commits"] += 1
            elif e["event"] == "rebalance":
                m["rebalances"] += 1
            elif e["event"] == "leave":
                m["left"] = True
        members.pop("(new member)", None)  # a join before the broker gave a member id
        group_out[g] = {"generations": sorted(x for x in generations if x is not None),
                        "members": members, "timeline": timeline}
    return {
        "apis": sorted(apis.values(), key=lambda a: (a["api_key"] if a["api_key"] is not None else 1 << 16,
                                                    a["version"] if a["version"] is not None else -1)),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1]["count"])),
        "rtt": rtt_out,
        "topic_partitions": sorted(tps.values(), key=lambda t: (t["topic"], t["partition"] if t["partition"] is not None else -1)),
        "groups": group_out,
    }


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for n, r in enumerate(cells):
        out.append("  " + "  ".join(c.ljust(w) if j == 0 or not c.replace(".", "").lstrip("-").isdigit()
                                    else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))).rstrip())
        if n == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return out


def _detail_text(e: dict[str, Any]) -> str:
    parts: list[str] = []
    for k, v in e.items():
        if k in ("time", "packet", "client_id", "member", "event") or v in (None, [], {}, ""):
            continue
        if isinstance(v, dict):
            v = ", ".join(f"{a}: {', '.join(map(str, b)) if isinstance(b, list) else b}" for a, b in v.items())
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        parts.append(f"{k} {v}")
    return "; ".join(parts)


def stats_lines(stats: dict[str, Any]) -> list[str]:
    out = ["requests and responses per API and version:"]
    out += _table(["api", "version", "requests", "responses", "undecoded"],
                  [[a["api"] or f"api {a['api_key']}", a["version"], a["requests"], a["responses"], a["undecoded"]]
                   for a in stats["apis"]])
    out.append("")
    out.append("errors:" if stats["errors"] else "errors: none")
    if stats["errors"]:
        out += _table(["error", "code", "count", "in"],
                      [[name, e["error_code"], e["count"], ", ".join(f"{a} {n}" for a, n in e["apis"].items())]
                       for name, e in stats["errors"].items()])
    out.append("")
    out.append("round-trip times (ms) per broker and API:")
    out += _table(["broker", "api", "count", "p50", "p90", "p99", "max"],
                  [[r["broker"], r["api"], r["count"], f"{r['p50_ms']:.3f}", f"{r['p90_ms']:.3f}",
                    f"{r['p99_ms']:.3f}", f"{r['max_ms']:.3f}"] for r in stats["rtt"]])
    out.append("")
    out.append("records per topic-partition (bytes as on the wire):" if stats["topic_partitions"]
               else "records per topic-partition: none")
    if stats["topic_partitions"]:
        out += _table(["topic-partition", "produced records", "produced bytes", "fetched records", "fetched bytes"],
                      [[f"{t['topic']}-{t['partition']}", t["produced_records"], t["produced_bytes"],
                        t["fetched_records"], t["fetched_bytes"]] for t in stats["topic_partitions"]])
    for g, info in stats["groups"].items():
        out.append("")
        gens = ", ".join(str(x) for x in info["generations"]) or "none seen"
        out.append(f"group {g!r}: generations {gens}")
        out += _table(["member", "client id", "joins", "generations", "assignments", "commits", "rebalances", "left"],
                      [[m, v["client_id"], v["joins"], ",".join(str(x) for x in v["generations"]) or None,
                        v["assignments"], v["commits"], v["rebalances"], "yes" if v["left"] else "no"]
                       for m, v in info["members"].items()])
        out.append("  timeline:")
        for e in info["timeline"]:
            detail = _detail_text(e)
            out.append(f"    {e['time'][11:-1] if e['time'] else '-'}  #{e['packet']}  {e['member'] or '-'}  "
                       f"{e['event']}" + (f"  {detail}" if detail else ""))
    return out
