"""One benchmark client in its own process: ``python -m bench.clients '<json spec>'``.

The spec (written by :func:`bench.harness.run_client`) names the client, the bootstrap
servers, the topic, how many records to expect and a fresh group id.  The process consumes
until it has them all (or nothing arrives for ``stall_s``), then prints one line
``RESULT {json}`` and exits.  Every client does the same work per record: count it and add up
the length of its value, which is what an application touching its data at least does.

Measured here, in the consuming process:

* ``join_s`` — subscribe() until the first partition assignment (group clients only);
* ``first_record_s`` — subscribe()/start until the first record;
* ``elapsed_s`` — from the first delivery of records until the last record; records/s and
  MB/s are over this window (``records_per_s_from_assignment`` counts from the assignment);
* ``cpu_s`` — CPU time of the whole process (every thread: librdkafka's, kwire's driver)
  over the same window; ``cpu_total_s`` includes start-up, joining and imports;
* ``maxrss_mib`` — the peak resident set of the process (``VmHWM``; ``ru_maxrss`` would
  include the forked parent's peak, which Linux keeps across execve);
  ``rss_after_imports_mib`` — what the interpreter and the imports alone took.
"""
from __future__ import annotations

import json
import os
import resource
import struct
import sys
import threading
import time
import traceback

_CPU_AT_START = time.process_time()


def _status_mib(field: str = "VmRSS") -> float | None:
    """A memory figure of this process from /proc/self/status, in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Meter:
    """Counts records and keeps the clock and CPU readings a result needs."""

    def __init__(self, expected: int, stall_s: float):
        self.expected = expected
        self.stall_s = stall_s
        self.records = 0
        self.value_bytes = 0
        self.first_n = 0             # records in the first delivery (outside the timed window)
        self.t_start = None          # subscribe() / assign() / first Fetch sent
        self.t_assigned = None
        self.cpu_assigned = None
        self.t_ready = None
        self.cpu_ready = None
        self.t_first = None
        self.t_last = None
        self.cpu_first = None
        self.cpu_last = None
        self.t_first_wall = None
        self.t_last_wall = None
        self.t_progress = None
        self.rss_after_imports = _status_mib()
        self.extra: dict = {}        # client-specific figures, copied into the metrics

    def start(self) -> None:
        self.t_start = self.t_progress = time.perf_counter()

    def assigned(self, *_args) -> None:
        if self.t_assigned is None:
            self.t_assigned = time.perf_counter()
            self.cpu_assigned = time.process_time()

    def ready(self) -> None:
        """An assign-mode loop is about to send its first Fetch (the group clients' moment
        of assignment)."""
        self.t_ready = time.perf_counter()
        self.cpu_ready = time.process_time()

    def add(self, n: int, nbytes: int = 0) -> None:
        if n <= 0:
            return
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
            self.cpu_first = time.process_time()
            self.t_first_wall = time.time()
            self.first_n = n
        self.records += n
        self.value_bytes += nbytes
        self.t_progress = now
        if self.records >= self.expected and self.t_last is None:
            self.t_last = now
            self.cpu_last = time.process_time()
            self.t_last_wall = time.time()

    @property
    def done(self) -> bool:
        return self.records >= self.expected

    def stalled(self) -> bool:
        return time.perf_counter() - self.t_progress > self.stall_s

    def check(self) -> bool:
        """True while the loop should go on; raises when nothing arrives for stall_s."""
        if self.done:
            return False
        if self.stalled():
            raise TimeoutError(f"no records for {self.stall_s:.0f}s after {self.records}/{self.expected}")
        return True

    def metrics(self) -> dict:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        # Peak RSS is VmHWM: ru_maxrss would carry over the high-water mark of the forked
        # parent (Linux keeps it across execve), so every child would show the harness's size.
        hwm = _status_mib("VmHWM")
        m = {
            "maxrss_mib": round(hwm if hwm is not None else ru.ru_maxrss / 1024, 1),
            "rss_after_imports_mib": None if self.rss_after_imports is None else round(self.rss_after_imports, 1),
            "cpu_total_s": round(time.process_time() - _CPU_AT_START, 4),
            "cpu_user_total_s": round(ru.ru_utime, 4),
            "cpu_sys_total_s": round(ru.ru_stime, 4),
            "value_bytes": self.value_bytes,
            **self.extra,
        }
        if self.t_start is not None and self.t_assigned is not None:
            m["join_s"] = round(self.t_assigned - self.t_start, 4)
        if self.t_start is not None and self.t_first is not None:
            m["first_record_s"] = round(self.t_first - self.t_start, 4)
        # The same counted from the assignment (or the first Fetch of an assign-mode loop) to
        # the last record: it includes offset look-up and the first fetch, and stays
        # meaningful when one delivery holds most of a small data set (many partitions).
        t0 = self.t_assigned if self.t_assigned is not None else self.t_ready
        c0 = self.cpu_assigned if self.t_assigned is not None else self.cpu_ready
        if t0 is not None and self.t_last is not None and self.records:
            m["records_per_s_from_assignment"] = round(self.records / max(self.t_last - t0, 1e-6), 1)
            m["cpu_s_per_million_from_assignment"] = round((self.cpu_last - c0) / self.records * 1e6, 4)
        if self.t_first is not None:
            end = self.t_last if self.t_last is not None else self.t_progress
            cpu_end = self.cpu_last if self.cpu_last is not None else time.process_time()
            elapsed = end - self.t_first
            cpu = cpu_end - self.cpu_first
            timed = self.records - self.first_n
            if timed > 0 and elapsed > 0:
                # The window opens once the first delivery has been handled, so it counts
                # the records that came after it.
                basis, rate = "after_first_delivery", timed / elapsed
            else:  # everything came in one delivery: the rate from the start is all we know
                basis = "from_start"
                elapsed = max(self.t_first - self.t_start, 1e-6)
                timed, rate = self.records, self.records / elapsed
            m.update({
                "elapsed_s": round(elapsed, 5),
                "rate_basis": basis,
                "first_delivery_records": self.first_n,
                "cpu_s": round(cpu, 4),
                "records_per_s": round(rate, 1),
                "cpu_s_per_million": round(cpu / timed * 1e6, 4) if basis == "after_first_delivery" else None,
                "cpu_utilization": round(cpu / elapsed, 3) if basis == "after_first_delivery" else None,
                "t_first_wall": self.t_first_wall,
                "t_last_wall": self.t_last_wall if self.t_last_wall is not None else time.time(),
            })
        return m


# --- kwire ------------------------------------------------------------------------------------

def run_kwire_consumer(spec: dict, meter: Meter) -> None:
    from kwire.consumer import Consumer

    conf = {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group_id"],
            "auto.offset.reset": "earliest", "client.id": "bench-kwire"}
    if spec.get("session_timeout_ms"):
        conf["session.timeout.ms"] = spec["session_timeout_ms"]
    c = Consumer(conf)
    try:
        meter.start()
        c.subscribe([spec["topic"]], on_assign=meter.assigned)
        while meter.check():
            msgs = c.consume(10000, timeout=1.0)
            nb = 0
            for m in msgs:
                v = m.value
                if v is not None:
                    nb += len(v)
            meter.add(len(msgs), nb)
    finally:
        _close_quietly(c.close)


_BATCH_HEAD = struct.Struct(">qi")          # base_offset, batch_length
_LAST_DELTA = struct.Struct(">i")          # last_offset_delta at byte 23 of a batch
_COUNT = struct.Struct(">i")               # records count at byte 57 (magic 2)


def scan_batches(data) -> tuple[int, int]:
    """(next offset after the last complete batch or -1, records counted from the headers).

    Walks only the 61-byte batch headers: a Fetch answer is cut at max bytes, so the last
    entry may be partial and is left for the next fetch."""
    mv = memoryview(data)
    end = len(mv)
    pos = 0
    next_offset = -1
    count = 0
    while pos + 12 <= end:
        base, length = _BATCH_HEAD.unpack_from(mv, pos)
        stop = pos + 12 + length
        if stop > end or length < 49:
            break
        next_offset = base + _LAST_DELTA.unpack_from(mv, pos + 23)[0] + 1
        if mv[pos + 16] == 2:
            count += _COUNT.unpack_from(mv, pos + 57)[0]
        pos = stop
    return next_offset, count


def list_offsets(net, topic: str, partitions, timestamp: int) -> dict[int, int]:
    """{partition: offset} from ListOffsets (-2 earliest, -1 latest), asking each leader."""
    md = net.metadata
    by_leader: dict[int, list[int]] = {}
    for p in partitions:
        by_leader.setdefault(md.leader_for(topic, p), []).append(p)
    out = {}
    for node, ps in by_leader.items():
        resp = net.request(node, "ListOffsets", {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1} for p in ps]}]})
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise RuntimeError(f"ListOffsets error {p['error_code']} on {topic} [{p['partition_index']}]")
                out[p["partition_index"]] = p["offset"]
    return out


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (low, high)} of ``topic``."""
    from kwire.net import NetworkClient

    net = NetworkClient({"bootstrap.servers": bootstrap, "client.id": "bench-watermarks"})
    try:
        parts = net.refresh_metadata([topic]).partitions_for(topic)
        low = list_offsets(net, topic, parts, -2)
        high = list_offsets(net, topic, parts, -1)
        return {p: (low[p], high[p]) for p in parts}
    finally:
        net.close()


def run_kwire_fetch(spec: dict, meter: Meter, decode: str) -> None:
    """A Fetch loop over NetworkClient (assigned partitions, no group), one Fetch in flight per
    leader; the next Fetch goes out (offsets from the batch headers) before this answer's
    records are decoded, as the Spark executor reader does."""
    from kwire import records
    from kwire.config import parse_config
    from kwire.net import NetworkClient
    from kwire.protocol.schema import ZERO_UUID

    if decode == "arrow":
        # Before the clock starts, as a long-running application would have: importing
        # pyarrow and its first RecordBatch cost ~0.3 s once (reported as arrow_warmup_s).
        t = time.perf_counter()
        sample = records.build_batch([(None, b"v", [("h", b"x")], 0)], 0)
        records.to_arrow(records.decode_columns(sample), topic="warmup", partition=0)
        meter.extra["arrow_warmup_s"] = round(time.perf_counter() - t, 4)
    cfg = parse_config({"bootstrap.servers": spec["bootstrap"], "client.id": "bench-kwire-fetch"},
                       role="consumer")
    net = NetworkClient(cfg, role="consumer")
    topic = spec["topic"]
    try:
        md = net.refresh_metadata([topic])
        parts = md.partitions_for(topic)
        if not parts:
            raise RuntimeError(f"topic {topic} has no partitions in the metadata")
        tid = md.topic_id(topic) or ZERO_UUID
        offsets = list_offsets(net, topic, parts, -2)  # from the log start, like auto.offset.reset=earliest
        by_leader: dict[int, list[int]] = {}
        for p in parts:
            by_leader.setdefault(md.leader_for(topic, p), []).append(p)
        inflight = {}
        max_version = None if tid != ZERO_UUID else 12

        def send(node: int) -> None:
            ps = [{"partition": p, "fetch_offset": offsets[p], "partition_max_bytes": cfg.max_partition_fetch_bytes}
                  for p in by_leader[node]]
            body = {"replica_id": -1, "max_wait_ms": cfg.fetch_wait_max_ms, "min_bytes": cfg.fetch_min_bytes,
                    "max_bytes": cfg.fetch_max_bytes, "isolation_level": 0, "session_id": 0,
                    "session_epoch": -1,
                    "topics": [{"topic": topic, "topic_id": tid, "partitions": ps}],
                    "forgotten_topics_data": [], "rack_id": ""}
            inflight[net.send(node, "Fetch", body, max_version=max_version)] = node

        meter.start()
        meter.ready()
        for node in by_leader:
            send(node)
        while meter.check():
            for f in net.poll(1000):
                node = inflight.pop(f, None)
                if node is None:
                    continue
                resp = f.result()
                got = []
                for t in resp["responses"]:
                    for p in t["partitions"]:
                        if p["error_code"]:
                            raise RuntimeError(f"Fetch error {p['error_code']} on partition {p['partition_index']}")
                        data = p["records"]
                        if data is None or len(data) == 0:
                            continue
                        nxt, n = scan_batches(data)
                        if nxt >= 0:
                            offsets[p["partition_index"]] = nxt
                        got.append((p["partition_index"], data, n))
                send(node)
                for idx, data, n in got:
                    if decode == "raw":
                        meter.add(n)
                    elif decode == "records":
                        k = nb = 0
                        for rec in records.iter_records(data, topic=topic, partition=idx):
                            k += 1
                            v = rec.value
                            if v is not None:
                                nb += len(v)
                        meter.add(k, nb)
                    else:  # arrow
                        cols = records.decode_columns(data)
                        table = records.to_arrow(cols, topic=topic, partition=idx)
                        k = table.num_rows
                        meter.add(k, cols["value_offsets"][k] if k else 0)
    finally:
        net.close()


# --- the peers ----------------------------------------------------------------------------------

def run_confluent(spec: dict, meter: Meter, extra: dict | None = None, *,
                  module: str = "confluent_kafka", poll: bool = False) -> None:
    """A classic confluent-kafka consumer: consume(num_messages=10000) batches, or (``poll``) one
    poll() per message.  ``module="kwire.confluent"`` runs the same code on kwire's adapter."""
    import importlib

    confluent_kafka = importlib.import_module(module)
    conf = {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group_id"],
            "auto.offset.reset": "earliest", "client.id": "bench-confluent"}
    conf.update(extra or {})
    if spec.get("session_timeout_ms"):
        conf["session.timeout.ms"] = spec["session_timeout_ms"]
    c = confluent_kafka.Consumer(conf)
    eof = confluent_kafka.KafkaError._PARTITION_EOF
    try:
        meter.start()
        c.subscribe([spec["topic"]], on_assign=meter.assigned)
        if poll:
            while meter.check():
                n = nb = 0
                for _ in range(10000):  # meter.check() per 10,000 polls, as per batch below
                    m = c.poll(0.1 if n == 0 else 0)
                    if m is None:
                        break
                    if m.error() is not None:
                        if m.error().code() == eof:
                            continue
                        raise RuntimeError(str(m.error()))
                    n += 1
                    v = m.value()
                    if v is not None:
                        nb += len(v)
                meter.add(n, nb)
            return
        while meter.check():
            msgs = c.consume(num_messages=10000, timeout=1.0)
            n = nb = 0
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == eof:
                        continue
                    raise RuntimeError(str(m.error()))
                n += 1
                v = m.value()
                if v is not None:
                    nb += len(v)
            meter.add(n, nb)
    finally:
        _close_quietly(c.close)


def run_kafka_python(spec: dict, meter: Meter) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            meter.assigned()

    options = dict(spec.get("options") or {})
    if "api_version" in options:
        options["api_version"] = tuple(options["api_version"])
    if spec.get("session_timeout_ms"):
        options["session_timeout_ms"] = spec["session_timeout_ms"]
    c = KafkaConsumer(bootstrap_servers=spec["bootstrap"], group_id=spec["group_id"],
                      auto_offset_reset="earliest", client_id="bench-kafka-python", **options)
    try:
        meter.start()
        c.subscribe([spec["topic"]], listener=Listener())
        while meter.check():
            batch = c.poll(timeout_ms=1000)
            n = nb = 0
            for msgs in batch.values():
                for m in msgs:
                    n += 1
                    v = m.value
                    if v is not None:
                        nb += len(v)
            meter.add(n, nb)
    finally:
        _close_quietly(lambda: c.close(autocommit=False))


def run_aiokafka(spec: dict, meter: Meter) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            meter.assigned()

    async def main():
        options = {}
        if spec.get("session_timeout_ms"):
            options["session_timeout_ms"] = spec["session_timeout_ms"]
        c = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], group_id=spec["group_id"],
                             auto_offset_reset="earliest", client_id="bench-aiokafka", **options)
        meter.start()
        await c.start()
        try:
            c.subscribe([spec["topic"]], listener=Listener())
            while meter.check():
                batch = await c.getmany(timeout_ms=1000)
                n = nb = 0
                for msgs in batch.values():
                    for m in msgs:
                        n += 1
                        v = m.value
                        if v is not None:
                            nb += len(v)
                meter.add(n, nb)
        finally:
            try:
                await asyncio.wait_for(c.stop(), 10)
            except Exception:
                pass

    asyncio.run(main())


# librdkafka's throughput tuning for a consumer: no back-off when its queue fills, a bigger
# prefetch queue (kwire.confluent accepts both: the first as a no-op, the second as the same
# bound kwire has)
_CONFLUENT_TUNED = {"fetch.queue.backoff.ms": 0, "queued.max.messages.kbytes": 262144}

CLIENTS = {
    "kwire-consumer": run_kwire_consumer,
    "kwire-fetch-raw": lambda spec, meter: run_kwire_fetch(spec, meter, "raw"),
    "kwire-fetch-records": lambda spec, meter: run_kwire_fetch(spec, meter, "records"),
    "kwire-fetch-arrow": lambda spec, meter: run_kwire_fetch(spec, meter, "arrow"),
    "confluent-kafka": run_confluent,
    "confluent-kafka-backoff10": lambda spec, meter: run_confluent(spec, meter, {"fetch.queue.backoff.ms": 10}),
    # one poll() per message; "tuned" as librdkafka's docs advise for throughput
    "confluent-kafka-poll": lambda spec, meter: run_confluent(spec, meter, _CONFLUENT_TUNED, poll=True),
    # the same two programs on kwire.confluent, only the import changed
    "kwire-confluent": lambda spec, meter: run_confluent(spec, meter, module="kwire.confluent"),
    "kwire-confluent-poll": lambda spec, meter: run_confluent(spec, meter, _CONFLUENT_TUNED, poll=True,
                                                              module="kwire.confluent"),
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def _close_quietly(fn, timeout_s: float = 10.0) -> None:
    """Close a client without letting a hanging close() hold the result back."""
    t = threading.Thread(target=lambda: _ignore(fn), daemon=True)
    t.start()
    t.join(timeout_s)


def _ignore(fn) -> None:
    try:
        fn()
    except Exception:
        pass


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    meter = Meter(int(spec["expected"]), float(spec.get("stall_s", 30.0)))
    ok, error = True, None
    try:
        run = CLIENTS[spec["client"]]
        run(spec, meter)
        if meter.records != meter.expected:
            ok, error = False, f"consumed {meter.records} records, expected {meter.expected}"
    except BaseException as exc:  # the harness records any failure instead of numbers
        ok = False
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        error = f"{type(exc).__name__}: {exc} [{''.join(tb[-3:]).strip()[-600:]}]"
    result = {"client": spec["client"], "ok": ok, "error": error, "records": meter.records,
              "metrics": meter.metrics()}
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # do not wait for client threads that outlive close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
