"""An in-memory fake Kafka cluster and a fake-clock driver for the consumer's state machines.

Every request body a state machine builds is encoded and decoded with kwire's codec at the
version the fake negotiates, and every response the fake builds is too, so field names and
versions are checked exactly as on the wire.  Then the fake answers with a simplified broker:

* a classic group coordinator (JoinGroup waits for every member, MEMBER_ID_REQUIRED for new
  members, generations, heartbeats with session timeouts, SyncGroup, LeaveGroup, offsets);
* partition logs of fake record batches (Fetch with KIP-227 sessions, ListOffsets,
  OffsetForLeaderEpoch);
* error injection per API (``cluster.inject("Heartbeat", E.NOT_COORDINATOR)``).

Record batches here are Python objects behind an opaque token in the ``records`` bytes; the
fetcher is given :func:`fake_iter_records` and :func:`fake_scan` to read them (read_committed
with aborted transactions needs real batches: the filter slices the record set by byte).  With ``real_records=True`` the
cluster answers Fetch with real magic-2 batches (kwire's ``build_batch``) instead, for the real
record layer.

Two ways to drive it: :class:`Driver` runs individual state machines on a fake clock;
:class:`FakeNetwork` stands in for the NetworkClient under the consumer's real driver
(:class:`kwire.consumer.driver.Driver`), whose ``step()``/``on_done()`` then run unchanged.
"""
from __future__ import annotations

import itertools
import struct
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from kwire.consumer._codes import E
from kwire.consumer.types import COORDINATOR, COORDINATOR_BROKER
from kwire.errors import KafkaConnectionError, TruncatedError
from kwire.net.metadata import Metadata
from kwire.protocol import api as P

DEFER = object()


# --- fake record batches ------------------------------------------------------------------------

@dataclass
class FRecord:
    offset: int
    value: bytes
    key: bytes | None = None
    timestamp: int = 0
    topic: str | None = None
    partition: int = -1
    leader_epoch: int | None = None


@dataclass
class FBatch:
    base_offset: int
    last_offset: int
    records: list
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False
    partition_leader_epoch: int = 0


_REGISTRY: dict[bytes, list] = {}
_tokens = itertools.count(1)


def pack_batches(batches: list[FBatch], *, truncated_tail: bool = False) -> bytes:
    token = struct.pack(">Q", next(_tokens))
    _REGISTRY[token] = (batches, truncated_tail)
    return token


def real_batches(batches: list[FBatch]) -> bytes:
    """The batches as kwire's encoder writes them (magic 2, consecutive offsets)."""
    from kwire.records import build_batch

    out = []
    for b in batches:
        if b.is_control:
            recs = [(r.key, struct.pack(">hi", 0, 0), [], r.timestamp) for r in b.records]
        else:
            recs = [(r.key, r.value, [], r.timestamp) for r in b.records]
        out.append(build_batch(recs, b.base_offset, producer_id=b.producer_id,
                               producer_epoch=0 if b.producer_id >= 0 else -1,
                               base_sequence=0 if b.producer_id >= 0 else -1,
                               is_transactional=b.is_transactional, is_control=b.is_control,
                               partition_leader_epoch=b.partition_leader_epoch))
    return b"".join(out)


def fake_iter_batches(data, check_crc=True, topic=None, partition=-1):
    batches, truncated = _REGISTRY[bytes(data)]
    for b in batches:
        for r in b.records:
            r.topic, r.partition = topic, partition
        yield b
    if truncated:  # (kwire.records skips a truncated tail; a decoder raising is handled too)
        raise TruncatedError("partial trailing batch")


def fake_iter_records(data, check_crc=True, topic=None, partition=-1):
    for b in fake_iter_batches(data, check_crc, topic, partition):
        if not b.is_control:
            yield from b.records


def fake_scan(data, until_damage=True):
    """kwire.records.scan_spans for token batches (their byte ranges mean nothing)."""
    from kwire.records import Span

    batches, _ = _REGISTRY[bytes(data)]
    return [Span(0, len(data), b.base_offset, b.last_offset, 2, b.partition_leader_epoch,
                 b.producer_id, b.is_transactional, b.is_control) for b in batches]


def control_record(offset: int, abort: bool) -> FRecord:
    return FRecord(offset, b"", key=struct.pack(">hh", 0, 0 if abort else 1))


# --- the fake cluster ---------------------------------------------------------------------------

@dataclass
class Member:
    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list
    protocol_type: str
    last_heartbeat_ms: int
    joined: bool = False
    join_req: object = None
    sync_req: object = None
    assignment: bytes = b""


@dataclass
class Group:
    group_id: str
    state: str = "Empty"  # Empty, PreparingRebalance, CompletingRebalance, Stable
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    members: dict = field(default_factory=dict)
    pending_ids: set = field(default_factory=set)
    offsets: dict = field(default_factory=dict)  # tp -> (offset, leader_epoch, metadata)
    rebalance_deadline_ms: int = 0


class Pending:
    """A deferred response the fake completes later."""

    def __init__(self, req, node, api, version):
        self.req, self.node, self.api, self.version = req, node, api, version
        self.response = None


class FakeCluster:
    def __init__(self, nodes=(1, 2, 3), *, coordinator_id: int = 1, versions: dict | None = None,
                 real_records: bool = False):
        self.real_records = real_records
        self.nodes = list(nodes)
        self.coordinator_id = coordinator_id
        self.versions = versions or {}
        self.groups: dict[str, Group] = {}
        self.topics: dict[str, int] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.leaders: dict[tuple, int] = {}
        self.leader_epochs: dict[tuple, int] = {}
        self.logs: dict[tuple, list[FBatch]] = defaultdict(list)
        self.log_start: dict[tuple, int] = defaultdict(int)
        self.epoch_ends: dict[tuple, dict[int, int]] = defaultdict(dict)  # tp -> {epoch: end}
        self.injected: dict[str, list] = defaultdict(list)
        self.log: list = []  # (now, node, api, version, body)
        self.deferred: list[Pending] = []
        self.fetch_sessions: dict[int, dict] = {}
        self._session_ids = itertools.count(1000)
        self._member_seq = itertools.count(1)
        self.now_ms = 0
        self.member_id_required = True
        self.unsupported: set[str] = set()

    # --- setup -------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, *, with_id: bool = True) -> None:
        self.topics[name] = partitions
        if with_id:
            self.topic_ids[name] = uuid.uuid4()
        for p in range(partitions):
            self.leaders[(name, p)] = self.nodes[p % len(self.nodes)]
            self.leader_epochs[(name, p)] = 0

    def append(self, tp, values, *, producer_id=-1, transactional=False, epoch=None) -> FBatch:
        log = self.logs[tp]
        base = log[-1].last_offset + 1 if log else self.log_start[tp]
        recs = [FRecord(base + i, v) for i, v in enumerate(values)]
        b = FBatch(base, base + len(values) - 1, recs, producer_id, transactional, False,
                   self.leader_epochs.get(tp, 0) if epoch is None else epoch)
        log.append(b)
        return b

    def append_control(self, tp, producer_id, abort: bool) -> FBatch:
        log = self.logs[tp]
        base = log[-1].last_offset + 1 if log else 0
        b = FBatch(base, base, [control_record(base, abort)], producer_id, True, True,
                   self.leader_epochs.get(tp, 0))
        log.append(b)
        return b

    def end_offset(self, tp) -> int:
        log = self.logs[tp]
        return log[-1].last_offset + 1 if log else self.log_start[tp]

    def inject(self, api: str, code, *, times: int = 1) -> None:
        """The next ``times`` requests of ``api`` fail with ``code`` (an int error code, or an
        exception instance to fail the request as a network error would)."""
        self.injected[api].extend([code] * times)

    def metadata(self) -> Metadata:
        md = Metadata()
        self.refresh(md)
        return md

    def refresh(self, md: Metadata) -> None:
        md.update(self.metadata_response(), self.now_ms, all_topics=True)

    def metadata_response(self) -> dict:
        return {
            "brokers": [{"node_id": n, "host": "fake", "port": 9000 + n, "rack": None} for n in self.nodes],
            "cluster_id": "fake", "controller_id": self.nodes[0],
            "topics": [{"error_code": 0, "name": t, "topic_id": self.topic_ids.get(t, uuid.UUID(int=0)),
                        "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": p,
                                        "leader_id": self.leaders[(t, p)],
                                        "leader_epoch": self.leader_epochs[(t, p)],
                                        "replica_nodes": [self.leaders[(t, p)]], "isr_nodes": [],
                                        "offline_replicas": []} for p in range(n)]}
                       for t, n in self.topics.items()]}

    # --- request entry point -----------------------------------------------------------------

    def version_for(self, api: str, req) -> int:
        a = P.api(api)
        v = self.versions.get(api, a.max_version)
        if req.max_version is not None:
            v = min(v, req.max_version)
        if req.min_version is not None:
            v = max(v, req.min_version)
        return v

    def handle(self, node, req, now_ms):
        """-> (version, response dict | exception | DEFER handle)."""
        self.now_ms = now_ms
        api = req.api
        version = self.version_for(api, req)
        body = req.body(version)
        wire = P.encode_request_body(api, version, body)
        decoded = P.decode_request_body(api, version, wire)
        self.log.append((now_ms, node, api, version, decoded))
        if api in self.unsupported:
            from kwire.errors import UnsupportedVersionError
            return version, UnsupportedVersionError(f"{api} is not supported")
        inj = self.injected.get(api)
        if inj:
            code = inj.pop(0)
            if isinstance(code, BaseException):
                return version, code
            return version, self._error_response(api, version, decoded, code)
        handler = getattr(self, "_h_" + api)
        req._pending = pend = Pending(req, node, api, version)
        resp = handler(node, version, decoded, req)
        if resp is DEFER:
            self.deferred.append(pend)
            return version, pend
        return version, self._roundtrip(api, version, resp)

    def _roundtrip(self, api, version, resp):
        wire = P.encode_response_body(api, version, resp)
        return P.decode_response_body(api, version, wire)

    def complete(self, pend: Pending, resp) -> None:
        pend.response = self._roundtrip(pend.api, pend.version, resp)

    def _error_response(self, api, version, body, code):
        if api == "Heartbeat" or api == "JoinGroup" or api == "SyncGroup" or api == "LeaveGroup":
            return self._roundtrip(api, version, {"error_code": code, "member_id": body.get("member_id", ""),
                                                  "generation_id": -1, "members": []})
        if api == "FindCoordinator":
            return self._roundtrip(api, version, {"error_code": code, "node_id": -1, "host": "", "port": -1,
                                                  "coordinators": [{"key": k, "node_id": -1, "host": "",
                                                                    "port": -1, "error_code": code}
                                                                   for k in body.get("coordinator_keys", [])]})
        if api == "OffsetCommit":
            return self._roundtrip(api, version, {"topics": [
                {"name": t.get("name"), "topic_id": t.get("topic_id"),
                 "partitions": [{"partition_index": p["partition_index"], "error_code": code}
                                for p in t["partitions"]]} for t in body["topics"]]})
        if api == "OffsetFetch":
            return self._roundtrip(api, version, {"error_code": code, "topics": [],
                                                  "groups": [{"group_id": g["group_id"], "topics": [],
                                                              "error_code": code}
                                                             for g in body.get("groups", [])]})
        if api == "Fetch":
            return self._roundtrip(api, version, {"error_code": code, "session_id": 0, "responses": []})
        raise NotImplementedError(api)

    # --- time ------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        self.now_ms = now_ms
        for g in self.groups.values():
            self._expire_sessions(g, now_ms)
            if g.state == "PreparingRebalance":
                self._maybe_complete_join(g, now_ms)
        for pend in list(self.deferred):
            if pend.api == "Fetch" and pend.response is None:
                resp = self._fetch_answer(pend.node, pend.version, pend.req._fetch_body, pend.req,
                                          final=now_ms >= pend.req._fetch_deadline)
                if resp is not None:
                    self.complete(pend, resp)

    def take_ready(self) -> list[Pending]:
        ready = [p for p in self.deferred if p.response is not None]
        self.deferred = [p for p in self.deferred if p.response is None]
        return ready

    # --- group coordinator -----------------------------------------------------------------------

    def _group(self, gid) -> Group:
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = Group(gid)
        return g

    def _h_FindCoordinator(self, node, version, body, req):
        keys = body.get("coordinator_keys") or [body.get("key")]
        c = {"node_id": self.coordinator_id, "host": "fake", "port": 9000 + self.coordinator_id,
             "error_code": 0, "error_message": None}
        return {**c, "coordinators": [{"key": k, **c} for k in keys]}

    def _not_coordinator(self, node):
        return node != self.coordinator_id

    def _h_JoinGroup(self, node, version, body, req):
        if self._not_coordinator(node):
            return {"error_code": E.NOT_COORDINATOR, "generation_id": -1, "member_id": body["member_id"],
                    "members": []}
        g = self._group(body["group_id"])
        mid = body["member_id"]
        iid = body.get("group_instance_id")
        if not mid:
            if iid:
                # static member: reuse its slot
                old = next((m for m in g.members.values() if m.instance_id == iid), None)
                mid = f"{iid}-{next(self._member_seq)}"
                if old is not None:
                    del g.members[old.member_id]
                    if g.leader == old.member_id:
                        g.leader = mid
            elif self.member_id_required and version >= 4:
                mid = f"{body['group_id']}-m{next(self._member_seq)}"
                g.pending_ids.add(mid)
                return {"error_code": E.MEMBER_ID_REQUIRED, "generation_id": -1, "member_id": mid,
                        "members": []}
            else:
                mid = f"{body['group_id']}-m{next(self._member_seq)}"
        elif mid not in g.members and mid not in g.pending_ids:
            return {"error_code": E.UNKNOWN_MEMBER_ID, "generation_id": -1, "member_id": mid,
                    "members": []}
        g.pending_ids.discard(mid)
        m = g.members.get(mid)
        if m is None:
            m = Member(mid, iid, body["session_timeout_ms"], body.get("rebalance_timeout_ms", -1)
                       if body.get("rebalance_timeout_ms", -1) > 0 else body["session_timeout_ms"],
                       body["protocols"], body["protocol_type"], self.now_ms)
            g.members[mid] = m
        m.protocols = body["protocols"]
        m.joined = True
        m.join_req = req
        m.last_heartbeat_ms = self.now_ms
        if g.state != "PreparingRebalance":
            self._prepare_rebalance(g)
        self._maybe_complete_join(g, self.now_ms)
        return DEFER

    def _prepare_rebalance(self, g: Group) -> None:
        g.state = "PreparingRebalance"
        g.rebalance_deadline_ms = self.now_ms + max((m.rebalance_timeout_ms for m in g.members.values()),
                                                    default=0)
        for m in g.members.values():
            if m.sync_req is not None:
                pend = m.sync_req._pending
                self.complete(pend, {"error_code": E.REBALANCE_IN_PROGRESS, "assignment": b""})
                m.sync_req = None

    def _maybe_complete_join(self, g: Group, now_ms: int) -> None:
        if not g.members:
            g.state = "Empty"
            return
        if not all(m.joined for m in g.members.values()):
            if now_ms < g.rebalance_deadline_ms:
                return
            for mid in [mid for mid, m in g.members.items() if not m.joined]:
                del g.members[mid]
            if not g.members:
                g.state = "Empty"
                return
        g.generation += 1
        counts = defaultdict(int)
        for m in g.members.values():
            for p in m.protocols:
                counts[p["name"]] += 1
        first = next(iter(g.members.values()))
        candidates = [p["name"] for p in first.protocols if counts[p["name"]] == len(g.members)]
        g.protocol = candidates[0] if candidates else None
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = "CompletingRebalance"
        for m in g.members.values():
            members = []
            if m.member_id == g.leader:
                members = [{"member_id": o.member_id, "group_instance_id": o.instance_id,
                            "metadata": next(p["metadata"] for p in o.protocols if p["name"] == g.protocol)}
                           for o in g.members.values()]
            self.complete(m.join_req._pending, {
                "error_code": 0, "generation_id": g.generation, "protocol_type": "consumer",
                "protocol_name": g.protocol, "leader": g.leader, "member_id": m.member_id,
                "members": members, "skip_assignment": False})
            m.join_req = None
            m.joined = False
            m.last_heartbeat_ms = now_ms

    def _member_check(self, g: Group | None, body):
        mid = body["member_id"]
        if g is None or mid not in g.members:
            return E.UNKNOWN_MEMBER_ID
        if body["generation_id"] != g.generation:
            return E.ILLEGAL_GENERATION
        return 0

    def _h_SyncGroup(self, node, version, body, req):
        if self._not_coordinator(node):
            return {"error_code": E.NOT_COORDINATOR, "assignment": b""}
        g = self.groups.get(body["group_id"])
        code = self._member_check(g, body)
        if code:
            return {"error_code": code, "assignment": b""}
        if g.state == "PreparingRebalance":
            return {"error_code": E.REBALANCE_IN_PROGRESS, "assignment": b""}
        m = g.members[body["member_id"]]
        m.sync_req = req
        m.last_heartbeat_ms = self.now_ms
        if body["member_id"] == g.leader:
            for a in body["assignments"]:
                if a["member_id"] in g.members:
                    g.members[a["member_id"]].assignment = bytes(a["assignment"])
            g.state = "Stable"
            # answer followers already waiting, below; the leader itself is deferred too
        if g.state == "Stable":
            for o in g.members.values():
                if o.sync_req is not None and o.sync_req is not req:
                    self.complete(o.sync_req._pending, {"error_code": 0, "protocol_type": "consumer",
                                                        "protocol_name": g.protocol,
                                                        "assignment": o.assignment})
                    o.sync_req = None
            m.sync_req = None
            return {"error_code": 0, "protocol_type": "consumer", "protocol_name": g.protocol,
                    "assignment": m.assignment}
        return DEFER

    def _h_Heartbeat(self, node, version, body, req):
        if self._not_coordinator(node):
            return {"error_code": E.NOT_COORDINATOR}
        g = self.groups.get(body["group_id"])
        code = self._member_check(g, body)
        if code:
            return {"error_code": code}
        g.members[body["member_id"]].last_heartbeat_ms = self.now_ms
        if g.state == "PreparingRebalance":
            return {"error_code": E.REBALANCE_IN_PROGRESS}
        return {"error_code": 0}

    def _h_LeaveGroup(self, node, version, body, req):
        if self._not_coordinator(node):
            return {"error_code": E.NOT_COORDINATOR, "members": []}
        g = self.groups.get(body["group_id"])
        ids = [m["member_id"] for m in body.get("members") or []] or [body.get("member_id")]
        out = []
        for mid in ids:
            if g is not None and mid in g.members:
                del g.members[mid]
                out.append({"member_id": mid, "group_instance_id": None, "error_code": 0})
            else:
                out.append({"member_id": mid, "group_instance_id": None, "error_code": E.UNKNOWN_MEMBER_ID})
        if g is not None:
            if g.members:
                self._prepare_rebalance(g)
                self._maybe_complete_join(g, self.now_ms)
            else:
                g.state = "Empty"
        return {"error_code": 0, "members": out}

    def _expire_sessions(self, g: Group, now_ms: int) -> None:
        expired = [mid for mid, m in g.members.items()
                   if m.join_req is None and now_ms - m.last_heartbeat_ms > m.session_timeout_ms]
        for mid in expired:
            del g.members[mid]
        if expired:
            if g.members:
                self._prepare_rebalance(g)
            else:
                g.state = "Empty"

    def _h_OffsetCommit(self, node, version, body, req):
        def answer(code):
            return {"topics": [{"name": t.get("name"), "topic_id": t.get("topic_id"),
                                "partitions": [{"partition_index": p["partition_index"], "error_code": code}
                                               for p in t["partitions"]]} for t in body["topics"]]}
        if self._not_coordinator(node):
            return answer(E.NOT_COORDINATOR)
        g = self._group(body["group_id"])
        gen = body.get("generation_id_or_member_epoch", -1)
        if gen != -1 or g.members:
            code = self._member_check(g, {"member_id": body["member_id"], "generation_id": gen})
            if code:
                return answer(code)
            if g.state == "CompletingRebalance":
                return answer(E.REBALANCE_IN_PROGRESS)
        names = {v: k for k, v in self.topic_ids.items()}
        for t in body["topics"]:
            name = t.get("name") or names.get(t.get("topic_id"))
            for p in t["partitions"]:
                g.offsets[(name, p["partition_index"])] = (
                    p["committed_offset"], p.get("committed_leader_epoch", -1), p.get("committed_metadata"))
        return answer(0)

    def _h_OffsetFetch(self, node, version, body, req):
        names = {v: k for k, v in self.topic_ids.items()}

        def topics_for(gid, topics):
            g = self.groups.get(gid)
            out = []
            for t in topics:
                name = t.get("name") or names.get(t.get("topic_id"))
                parts = []
                for p in t["partition_indexes"]:
                    off, ep, md = (g.offsets.get((name, p)) if g else None) or (-1, -1, None)
                    parts.append({"partition_index": p, "committed_offset": off,
                                  "committed_leader_epoch": ep, "metadata": md, "error_code": 0})
                out.append({"name": name, "topic_id": t.get("topic_id"), "partitions": parts})
            return out
        code = E.NOT_COORDINATOR if self._not_coordinator(node) else 0
        if version >= 8:
            return {"groups": [{"group_id": g["group_id"], "error_code": code,
                                "topics": [] if code else topics_for(g["group_id"], g["topics"])}
                               for g in body["groups"]]}
        return {"error_code": code, "topics": [] if code else topics_for(body["group_id"], body["topics"])}

    # --- partition logs --------------------------------------------------------------------------

    def _h_ListOffsets(self, node, version, body, req):
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["name"], p["partition_index"])
                if self.leaders.get(tp) != node:
                    parts.append({"partition_index": tp[1], "error_code": E.NOT_LEADER_OR_FOLLOWER,
                                  "offset": -1, "timestamp": -1, "leader_epoch": -1})
                    continue
                ts = p["timestamp"]
                found_ts = -1
                if ts == -2:
                    off = self.log_start[tp]
                elif ts == -1:
                    off = self.end_offset(tp)
                else:
                    hit = next((r for b in self.logs[tp] for r in b.records if r.timestamp >= ts), None)
                    off, found_ts = (hit.offset, hit.timestamp) if hit is not None else (-1, -1)
                    if hit is None and getattr(self, "no_match_answers_zero", False):
                        off = 0  # Tansu 0.6's answer when no record is that recent
                parts.append({"partition_index": tp[1], "error_code": 0, "offset": off, "timestamp": found_ts,
                              "leader_epoch": self.leader_epochs[tp]})
            out.append({"name": t["name"], "partitions": parts})
        return {"topics": out}

    def _h_OffsetForLeaderEpoch(self, node, version, body, req):
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                ends = self.epoch_ends[tp]
                ep = p["leader_epoch"]
                if ep in ends:
                    end_ep, end = ep, ends[ep]
                else:
                    end_ep, end = self.leader_epochs[tp], self.end_offset(tp)
                parts.append({"partition": tp[1], "error_code": 0, "leader_epoch": end_ep, "end_offset": end})
            out.append({"topic": t["topic"], "partitions": parts})
        return {"topics": out}

    def _h_Fetch(self, node, version, body, req):
        req._fetch_body = body
        req._fetch_deadline = self.now_ms + body["max_wait_ms"]
        resp = self._fetch_answer(node, version, body, req, final=body["max_wait_ms"] == 0)
        return DEFER if resp is None else resp

    def _fetch_answer(self, node, version, body, req, *, final: bool):
        names = {v: k for k, v in self.topic_ids.items()}
        sid, epoch = body.get("session_id", 0), body.get("session_epoch", -1)
        sessions = self.fetch_sessions.setdefault(node, {})
        if version >= 7 and epoch > 0:
            sess = sessions.get(sid)
            if sess is None:
                return {"error_code": E.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
            if sess["epoch"] != epoch and not getattr(req, "_epoch_checked", False):
                return {"error_code": E.INVALID_FETCH_SESSION_EPOCH, "session_id": 0, "responses": []}
            parts = sess["parts"]
        else:
            parts = {}
            sess = None
        if not getattr(req, "_epoch_checked", False):
            req._epoch_checked = True
            for t in body["topics"]:
                name = t.get("topic") or names.get(t.get("topic_id"))
                for p in t["partitions"]:
                    parts[(name, p["partition"])] = (p["fetch_offset"], p["partition_max_bytes"])
            for t in body.get("forgotten_topics_data") or []:
                name = t.get("topic") or names.get(t.get("topic_id"))
                for p in t["partitions"]:
                    parts.pop((name, p), None)
            if version >= 7 and epoch >= 0:
                if epoch == 0:
                    sid = next(self._session_ids)
                    sess = sessions[sid] = {"epoch": 0, "parts": parts}
                sess["epoch"] += 1
            req._fetch_parts = dict(parts)
            req._session_id = sid if version >= 7 and epoch >= 0 else 0
        parts = req._fetch_parts
        responses = defaultdict(list)
        any_data = False
        incremental = version >= 7 and epoch > 0
        for tp, (off, pmax) in sorted(parts.items()):
            if self.leaders.get(tp) != node:
                responses[tp[0]].append(self._fpart(tp, E.NOT_LEADER_OR_FOLLOWER))
                any_data = True
                continue
            # each fake batch counts as one byte against partition_max_bytes (at least one)
            batches = [b for b in self.logs[tp] if b.last_offset >= off][:max(1, pmax)]
            if off < self.log_start[tp] or off > self.end_offset(tp):
                responses[tp[0]].append(self._fpart(tp, E.OFFSET_OUT_OF_RANGE))
                any_data = True
                continue
            if batches:
                any_data = True
                aborted = getattr(self, "aborted", {}).get(tp, [])
                records = real_batches(batches) if self.real_records else pack_batches(batches)
                responses[tp[0]].append({**self._fpart(tp, 0), "records": records,
                                         "aborted_transactions": aborted})
            elif not incremental:
                responses[tp[0]].append(self._fpart(tp, 0))
        if not any_data and not final:
            return None
        # the broker's session now tracks where each partition will be fetched next
        return {"error_code": 0, "session_id": req._session_id,
                "responses": [{"topic": t, "topic_id": self.topic_ids.get(t), "partitions": ps}
                              for t, ps in responses.items()]}

    def _fpart(self, tp, code):
        return {"partition_index": tp[1], "error_code": code, "high_watermark": self.end_offset(tp),
                "last_stable_offset": self.end_offset(tp), "log_start_offset": self.log_start[tp],
                "aborted_transactions": None, "records": None, "preferred_read_replica": -1}


# --- the fake-clock driver ----------------------------------------------------------------------

class Clock:
    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


class Driver:
    """Runs state machines against a FakeCluster on a fake clock.

    Each step: the cluster ticks; ready deferred responses and last step's immediate responses
    are delivered; every machine polls and its requests go to the cluster.  ``node_of``
    resolves COORDINATOR for coordinator requests.
    """

    def __init__(self, cluster: FakeCluster, clock: Clock | None = None, tick_ms: int = 10):
        self.cluster = cluster
        self.clock = clock or Clock()
        self.tick_ms = tick_ms
        self.machines: list = []  # (machine, on_chunks callback)
        self._immediate: list = []
        self.sent: list = []
        self.down_nodes: set = set()

    def add(self, machine, on_result=None) -> None:
        self.machines.append((machine, on_result))

    def _node(self, machine, req):
        if req.node in (COORDINATOR, COORDINATOR_BROKER):
            return machine.coordinator_id
        if req.node is None:
            return self.cluster.nodes[0]
        return req.node

    def step(self) -> None:
        now = self.clock.now_ms
        self.cluster.tick(now)
        deliveries = self._immediate
        self._immediate = []
        for pend in self.cluster.take_ready():
            deliveries.append((pend.req.owner_machine, pend.req, pend.response))
        for machine, req, resp in deliveries:
            result = machine.on_response(req, resp, now)
            for m, cb in self.machines:
                if m is machine and cb is not None and result:
                    cb(result)
        for machine, _ in self.machines:
            for req in machine.poll(now).requests:
                req.owner_machine = machine
                node = self._node(machine, req)
                self.sent.append((now, node, req.api))
                if node in self.down_nodes:
                    self._immediate.append((machine, req, KafkaConnectionError(f"node {node} is down")))
                    continue
                version, resp = self.cluster.handle(node, req, now)
                if isinstance(resp, Pending):
                    continue
                self._immediate.append((machine, req, resp))

    def run(self, ms: int) -> None:
        end = self.clock.now_ms + ms
        while self.clock.now_ms < end:
            self.step()
            self.clock.advance(self.tick_ms)

    def run_until(self, cond, max_ms: int = 60_000) -> int:
        start = self.clock.now_ms
        while not cond():
            if self.clock.now_ms - start > max_ms:
                raise AssertionError(f"condition not met within {max_ms} ms")
            self.step()
            self.clock.advance(self.tick_ms)
        return self.clock.now_ms - start


# --- the consumer's real driver over the fake cluster ---------------------------------------------

class FakeRequest:
    """What NetworkClient.send returns (an InFlight's fields the driver reads), and what the
    fake cluster's handlers are given as the request."""

    def __init__(self, node, api, body, min_version, max_version):
        self.node, self.api, self._body = node, api, body
        self.min_version, self.max_version = min_version, max_version
        self.response = None
        self.error: BaseException | None = None

    def body(self, version):
        return self._body(version) if callable(self._body) else self._body


class FakeNetwork:
    """NetworkClient's surface, as kwire.consumer.driver.Driver uses it, over a FakeCluster on
    a fake clock: requests are answered (or deferred, like a long-poll Fetch) by the cluster
    at the next :meth:`poll`; metadata is refreshed from the cluster when asked for."""

    def __init__(self, cluster: FakeCluster, clock: Clock):
        self.cluster, self.clock = cluster, clock
        self.metadata = Metadata()
        self.stats = None
        self.authentication_error = None
        self.down_nodes: set = set()
        self.sent: list = []          # (now_ms, node, api)
        self._queued: list[FakeRequest] = []
        self._done: list[FakeRequest] = []
        self.closed = False

    def send(self, node_id, api, body, *, version=None, timeout_ms=None, min_version=None,
             max_version=None, keep_raw=False):
        f = FakeRequest(node_id, api, body, min_version, max_version)
        self._queued.append(f)
        return f

    def group_node(self, node_id, host=None, port=None):
        return node_id

    def wakeup(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def poll(self, timeout_ms: int = 0) -> list[FakeRequest]:
        now = self.clock.now_ms
        c = self.cluster
        if self.metadata.needs_update(now):
            self.metadata.update(c.metadata_response(), now, all_topics=True)
        c.tick(now)
        queued, self._queued = self._queued, []
        for f in queued:
            node = f.node if f.node is not None else c.nodes[0]
            self.sent.append((now, node, f.api))
            if node in self.down_nodes:
                f.error = KafkaConnectionError(f"node {node} is down")
            elif f.api == "Metadata":
                f.response = c.metadata_response()
            else:
                _version, resp = c.handle(node, f, now)
                if isinstance(resp, Pending):
                    continue
                if isinstance(resp, BaseException):
                    f.error = resp
                else:
                    f.response = resp
            self._done.append(f)
        for pend in c.take_ready():
            pend.req.response = pend.response
            self._done.append(pend.req)
        out, self._done = self._done, []
        return out
