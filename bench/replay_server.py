"""A one-node Kafka "broker" that serves a fixed topic from memory, for measuring clients alone.

    python -m bench.replay_server --topic t --partitions 3 --records 1000000 --value-bytes 100
    READY {"bootstrap": "127.0.0.1:40123", "records": 1000000, ...}

It exists so that a benchmark measures the *client*: a real broker (Tansu, librdkafka's mock
cluster) spends CPU on every Fetch and on the same two cores as the client.  Here every
partition's log is laid out once, at start, as a run of record batches built with
:func:`kwire.records.build_batch`; a Fetch answer is slices of that memory.  Requests and
responses are decoded and encoded with :mod:`kwire.protocol` (one thread per connection,
blocking sockets; encoding copies the slices once, which is cheap next to any client).

Layout of one partition's log (all partitions with the same record count share one)::

    [batch 0: offsets 0..R-1][batch 1: R..2R-1] ... [tail batch: the rest]

A full batch is one template batch with its base offset patched: the base offset lies
outside the batch CRC, so every copy stays valid.  Offset ``o`` is in batch ``o // R`` at byte
``(o // R) * B``; a Fetch returns whole batches from there, as many as fit in the
partition's max bytes (at least one, as a broker does for the first partition of an answer).

Enough of the group protocol for a lone consumer per group: FindCoordinator names this node,
JoinGroup makes the member its own leader, SyncGroup hands back what it assigned itself,
Heartbeat/LeaveGroup succeed, OffsetCommit/OffsetFetch keep offsets in a dict.  Metadata,
ListOffsets, OffsetForLeaderEpoch and ApiVersions answer for the one topic.  Anything else
closes the connection (and is reported on stderr).

Standard input closing (the harness's way of stopping it) or SIGTERM ends the process.
"""
from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
import uuid

from kwire import records
from kwire.protocol import api as kapi

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
NODE_ID = 0
_UNKNOWN_TOPIC_OR_PARTITION = 3
_OFFSET_OUT_OF_RANGE = 1
_UNKNOWN_TOPIC_ID = 100
_UNSUPPORTED_VERSION = 35
_MAX_EMPTY_WAIT_MS = 500


def default_batch_records(value_bytes: int) -> int:
    """Records per batch: 1000, or fewer so that a batch stays near 256 KiB."""
    return max(1, min(1000, 262_144 // (value_bytes + 16)))


class PartitionLog:
    """One partition's batches in one buffer (see the module docstring)."""

    def __init__(self, count: int, full_template: bytes | None, tail_template: bytes | None,
                 records_per_batch: int):
        self.high_watermark = count
        self.records_per_batch = records_per_batch
        full = count // records_per_batch
        self.batch_bytes = len(full_template) if full_template else 0
        buf = bytearray(self.batch_bytes * full + (len(tail_template) if tail_template else 0))
        for i in range(full):
            at = i * self.batch_bytes
            buf[at:at + self.batch_bytes] = full_template
            _I64.pack_into(buf, at, i * records_per_batch)
        if tail_template:
            at = full * self.batch_bytes
            buf[at:] = tail_template
            _I64.pack_into(buf, at, full * records_per_batch)
        self.data = bytes(buf)
        self.view = memoryview(self.data)
        self.full_batches = full

    def read(self, offset: int, max_bytes: int, at_least_one: bool) -> memoryview:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them (but at
        least one batch when ``at_least_one``)."""
        if offset >= self.high_watermark:
            return self.view[0:0]
        size, full, end = self.batch_bytes, self.full_batches, len(self.data)
        i = offset // self.records_per_batch
        start = i * size
        fit = max_bytes // size if size else 0
        j = min(i + fit, full)  # full batches [i, j) fit
        stop = j * size if j > i else start
        if j == full and end - start <= max_bytes:
            stop = end  # the tail batch fits too
        if stop == start and at_least_one:
            stop = (i + 1) * size if i < full else end
        return self.view[start:stop]


class ReplayData:
    """The topic: name, id, and one PartitionLog per partition."""

    def __init__(self, topic: str, partitions: int, records_total: int, value_bytes: int,
                 compression: str = "none", records_per_batch: int | None = None, seed: int = 7):
        from bench.harness import make_values

        self.topic = topic
        self.topic_id = uuid.uuid5(uuid.NAMESPACE_URL, f"kwire-replay:{topic}")
        rpb = records_per_batch or default_batch_records(value_bytes)
        base, extra = divmod(records_total, partitions)
        counts = [base + (1 if p < extra else 0) for p in range(partitions)]
        rpb = max(1, min(rpb, max(counts)))
        self.records_per_batch = rpb
        values = make_values(min(rpb, 1024), value_bytes, seed)
        ts = int(time.time() * 1000)

        def batch(n: int) -> bytes:
            return bytes(records.build_batch([(None, values[i % len(values)], [], ts) for i in range(n)],
                                             0, compression))

        full_template = batch(rpb)
        self.batch_bytes = len(full_template)
        logs_by_count: dict[int, PartitionLog] = {}
        self.logs: list[PartitionLog] = []
        for count in counts:
            log = logs_by_count.get(count)
            if log is None:
                tail = count % rpb
                log = logs_by_count[count] = PartitionLog(count, full_template,
                                                          batch(tail) if tail else None, rpb)
            self.logs.append(log)
        self.records_total = sum(counts)

    def log(self, topic: str | None, topic_id, partition: int) -> PartitionLog | None:
        if topic is not None and topic != self.topic:
            return None
        if topic is None and topic_id != self.topic_id:
            return None
        if 0 <= partition < len(self.logs):
            return self.logs[partition]
        return None


class Group:
    def __init__(self):
        self.generation = 0
        self.members: dict[str, bytes] = {}
        self.protocol_type = "consumer"
        self.protocol_name = ""
        self.assignments: dict[str, bytes] = {}
        self.offsets: dict[tuple[str, int], int] = {}


class ReplayServer:
    def __init__(self, data: ReplayData, host: str = "127.0.0.1", port: int = 0):
        self.data = data
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.host, self.port = self.sock.getsockname()[:2]
        self.groups: dict[str, Group] = {}
        self.lock = threading.Lock()  # guards self.groups across connection threads
        self._member_ids = iter(range(1, 1 << 62))
        self.handlers = {
            "ApiVersions": self.api_versions, "Metadata": self.metadata, "Fetch": self.fetch,
            "ListOffsets": self.list_offsets, "OffsetForLeaderEpoch": self.offset_for_leader_epoch,
            "FindCoordinator": self.find_coordinator, "JoinGroup": self.join_group,
            "SyncGroup": self.sync_group, "Heartbeat": self.heartbeat, "LeaveGroup": self.leave_group,
            "OffsetCommit": self.offset_commit, "OffsetFetch": self.offset_fetch,
        }

    # --- connections ---------------------------------------------------------------------------
    def serve_forever(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _recv_exact(conn: socket.socket, n: int) -> bytearray | None:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = conn.recv_into(view[got:])
            if k == 0:
                return None
            got += k
        return buf

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                head = self._recv_exact(conn, 4)
                if head is None:
                    return
                payload = self._recv_exact(conn, _I32.unpack(head)[0])
                if payload is None:
                    return
                out = self.handle(payload)
                if out is None:
                    return
                conn.sendall(out)
        except (ConnectionError, OSError):
            return
        finally:
            conn.close()

    def handle(self, payload) -> bytes | None:
        key, version, cid = kapi.peek_request_header(payload)
        try:
            a = kapi.api(key)
        except Exception:
            print(f"replay: unknown api key {key} v{version}; closing", file=sys.stderr)
            return None
        if a.name == "ApiVersions" and version > a.max_version:
            # KIP-511: answer in v0 format with the versions we do support
            body = {"error_code": _UNSUPPORTED_VERSION,
                    "api_keys": [{"api_key": 18, "min_version": 0, "max_version": a.max_version}]}
            return kapi.encode_response(a, 0, body, correlation_id=cid)
        handler = self.handlers.get(a.name)
        if handler is None:
            print(f"replay: {a.name} v{version} is not served; closing", file=sys.stderr)
            return None
        req = kapi.decode_request(payload, size_prefix=False)
        body = handler(version, req.body)
        return kapi.encode_response(a, version, body, correlation_id=cid)

    # --- cluster ---------------------------------------------------------------------------------
    def api_versions(self, version: int, req: dict) -> dict:
        keys = []
        # Produce is advertised but not served: librdkafka derives its "message format v2"
        # feature from the Produce and Fetch versions and will not fetch without it.
        for name in ("Produce", *self.handlers):
            a = kapi.api(name)
            keys.append({"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version})
        return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}

    def _broker(self) -> dict:
        return {"node_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}

    def _topic_metadata(self) -> dict:
        d = self.data
        return {"error_code": 0, "name": d.topic, "topic_id": d.topic_id, "is_internal": False,
                "partitions": [{"error_code": 0, "partition_index": p, "leader_id": NODE_ID,
                                "leader_epoch": 0, "replica_nodes": [NODE_ID], "isr_nodes": [NODE_ID],
                                "offline_replicas": []} for p in range(len(d.logs))],
                "topic_authorized_operations": -2147483648}

    def metadata(self, version: int, req: dict) -> dict:
        wanted = req.get("topics")
        topics = []
        if wanted is None or (version == 0 and not wanted):
            topics.append(self._topic_metadata())
        else:
            for t in wanted:
                name = t.get("name")
                if name == self.data.topic or (name is None and t.get("topic_id") == self.data.topic_id):
                    topics.append(self._topic_metadata())
                else:
                    topics.append({"error_code": _UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                                   "topic_id": t.get("topic_id") or uuid.UUID(int=0),
                                   "is_internal": False, "partitions": []})
        return {"throttle_time_ms": 0, "brokers": [self._broker()], "cluster_id": "kwire-replay",
                "controller_id": NODE_ID, "topics": topics, "cluster_authorized_operations": -2147483648,
                "error_code": 0}

    def fetch(self, version: int, req: dict) -> dict:
        budget = req.get("max_bytes", 0x7FFFFFFF)
        if budget <= 0:
            budget = 0x7FFFFFFF
        out_topics = []
        total = 0
        for t in req["topics"]:
            name = t.get("topic") if version < 13 else None
            tid = t.get("topic_id")
            parts = []
            for p in t["partitions"]:
                idx = p["partition"]
                log = self.data.log(name, tid, idx)
                if log is None:
                    parts.append({"partition_index": idx, "high_watermark": -1, "records": b"",
                                  "error_code": _UNKNOWN_TOPIC_OR_PARTITION if version < 13 else _UNKNOWN_TOPIC_ID,
                                  "aborted_transactions": []})
                    continue
                offset = p["fetch_offset"]
                if offset < 0 or offset > log.high_watermark:
                    parts.append({"partition_index": idx, "error_code": _OFFSET_OUT_OF_RANGE,
                                  "high_watermark": log.high_watermark, "last_stable_offset": log.high_watermark,
                                  "log_start_offset": 0, "aborted_transactions": [], "records": b""})
                    continue
                data = log.read(offset, min(p["partition_max_bytes"], budget - total), at_least_one=total == 0)
                total += len(data)
                parts.append({"partition_index": idx, "error_code": 0, "high_watermark": log.high_watermark,
                              "last_stable_offset": log.high_watermark, "log_start_offset": 0,
                              "aborted_transactions": [], "preferred_read_replica": -1, "records": data})
            out_topics.append({"topic": name or self.data.topic, "topic_id": tid or self.data.topic_id,
                               "partitions": parts})
        if total == 0:  # nothing to send: wait as a broker would for new data
            time.sleep(min(req.get("max_wait_ms", 0), _MAX_EMPTY_WAIT_MS) / 1000)
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out_topics}

    def list_offsets(self, version: int, req: dict) -> dict:
        topics = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                log = self.data.log(t["name"], None, p["partition_index"])
                if log is None:
                    parts.append({"partition_index": p["partition_index"], "error_code": _UNKNOWN_TOPIC_OR_PARTITION,
                                  "timestamp": -1, "offset": -1, "leader_epoch": -1})
                    continue
                ts = p.get("timestamp", -1)
                offset = log.high_watermark if ts == -1 else (
                    max(0, log.high_watermark - 1) if ts == -3 else 0)
                parts.append({"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1,
                              "offset": offset, "leader_epoch": 0, "old_style_offsets": [offset]})
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def offset_for_leader_epoch(self, version: int, req: dict) -> dict:
        topics = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                log = self.data.log(t["topic"], None, p["partition"])
                parts.append({"error_code": 0 if log else _UNKNOWN_TOPIC_OR_PARTITION,
                              "partition": p["partition"], "leader_epoch": 0,
                              "end_offset": log.high_watermark if log else -1})
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # --- the group protocol, for one member per group ---------------------------------------------
    def find_coordinator(self, version: int, req: dict) -> dict:
        keys = req.get("coordinator_keys") or [req.get("key", "")]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "node_id": NODE_ID,
                "host": self.host, "port": self.port,
                "coordinators": [{"key": k, "node_id": NODE_ID, "host": self.host, "port": self.port,
                                  "error_code": 0, "error_message": None} for k in keys]}

    def _group(self, group_id: str) -> Group:
        with self.lock:
            g = self.groups.get(group_id)
            if g is None:
                g = self.groups[group_id] = Group()
            return g

    def join_group(self, version: int, req: dict) -> dict:
        g = self._group(req["group_id"])
        member = req["member_id"] or f"{req['group_id']}-member-{next(self._member_ids)}"
        protocols = req["protocols"]
        with self.lock:
            g.generation += 1
            g.members = {member: protocols[0]["metadata"] if protocols else b""}
            g.protocol_type = req["protocol_type"]
            g.protocol_name = protocols[0]["name"] if protocols else ""
            return {"throttle_time_ms": 0, "error_code": 0, "generation_id": g.generation,
                    "protocol_type": g.protocol_type, "protocol_name": g.protocol_name,
                    "leader": member, "skip_assignment": False, "member_id": member,
                    "members": [{"member_id": m, "group_instance_id": None, "metadata": md}
                                for m, md in g.members.items()]}

    def sync_group(self, version: int, req: dict) -> dict:
        g = self._group(req["group_id"])
        with self.lock:
            for a in req.get("assignments") or []:
                g.assignments[a["member_id"]] = a["assignment"]
            assignment = g.assignments.get(req["member_id"], b"")
            return {"throttle_time_ms": 0, "error_code": 0, "protocol_type": g.protocol_type,
                    "protocol_name": g.protocol_name, "assignment": assignment}

    def heartbeat(self, version: int, req: dict) -> dict:
        return {"throttle_time_ms": 0, "error_code": 0}

    def leave_group(self, version: int, req: dict) -> dict:
        members = req.get("members") or []
        return {"throttle_time_ms": 0, "error_code": 0,
                "members": [{"member_id": m.get("member_id", ""), "group_instance_id": m.get("group_instance_id"),
                             "error_code": 0} for m in members]}

    def _topic_name(self, t: dict) -> str:
        return t.get("name") or (self.data.topic if t.get("topic_id") == self.data.topic_id else "")

    def offset_commit(self, version: int, req: dict) -> dict:
        g = self._group(req["group_id"])
        topics = []
        with self.lock:
            for t in req["topics"]:
                name = self._topic_name(t)
                for p in t["partitions"]:
                    g.offsets[(name, p["partition_index"])] = p["committed_offset"]
                topics.append({"name": name, "topic_id": t.get("topic_id") or self.data.topic_id,
                               "partitions": [{"partition_index": p["partition_index"], "error_code": 0}
                                              for p in t["partitions"]]})
        return {"throttle_time_ms": 0, "topics": topics}

    def _committed(self, g: Group, topics) -> list[dict]:
        if topics is None:  # every partition with a committed offset
            by_topic: dict[str, list[int]] = {}
            for (name, p) in g.offsets:
                by_topic.setdefault(name, []).append(p)
            topics = [{"name": n, "partition_indexes": ps} for n, ps in by_topic.items()]
        out = []
        for t in topics:
            name = self._topic_name(t)
            out.append({"name": name, "topic_id": t.get("topic_id") or self.data.topic_id,
                        "partitions": [{"partition_index": p, "committed_offset": g.offsets.get((name, p), -1),
                                        "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
                                       for p in t["partition_indexes"]]})
        return out

    def offset_fetch(self, version: int, req: dict) -> dict:
        if version < 8:
            g = self._group(req["group_id"])
            with self.lock:
                return {"throttle_time_ms": 0, "topics": self._committed(g, req.get("topics")), "error_code": 0}
        groups = []
        for rg in req["groups"]:
            g = self._group(rg["group_id"])
            with self.lock:
                groups.append({"group_id": rg["group_id"], "topics": self._committed(g, rg.get("topics")),
                               "error_code": 0})
        return {"throttle_time_ms": 0, "groups": groups}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000, help="records in the whole topic")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--batch-records", type=int, default=None,
                    help="records per batch (default: 1000, fewer for large values)")
    args = ap.parse_args(argv)
    data = ReplayData(args.topic, args.partitions, args.records, args.value_bytes, args.compression,
                      args.batch_records)
    server = ReplayServer(data, args.host, args.port)
    info = {"bootstrap": f"{server.host}:{server.port}", "topic": data.topic, "topic_id": str(data.topic_id),
            "records": data.records_total, "partitions": len(data.logs),
            "records_per_batch": data.records_per_batch, "batch_bytes": data.batch_bytes,
            "log_bytes": sum(len(log.data) for log in {id(x): x for x in data.logs}.values())}
    sys.stdout.write("READY " + json.dumps(info) + "\n")
    sys.stdout.flush()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sys.stdin.read()  # until the harness closes our stdin
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
