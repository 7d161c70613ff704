"""A consumer in a process of its own for the memory-budget tests (tests/consumer/test_budget.py):
it reads a whole backlog, checks every record arrives once and in order, and reports its memory.

    python -m tests.consumer.budget_member '{"bootstrap": ..., "topic": ..., "partitions": 1,
                                             "expected": N, "config": {...}}'

Each partition's values are ``b"%010d" % i`` + filler, i the record's offset.  It prints one
line ``RESULT {json}``: records, in_order, the error if any, and from /proc/self/status the
resident set before the first record (``rss_before``) and its peak (``hwm``), in bytes.
Nothing is held after it is checked, so the peak is the consumer's own buffering.
"""
from __future__ import annotations

import json
import sys
import time


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def main(spec: dict) -> dict:
    from kwire import TopicPartition
    from kwire.consumer import Consumer

    out = {"records": 0, "in_order": True, "error": None}
    conf = {"bootstrap.servers": spec["bootstrap"], "enable.partition.eof": False,
            **spec.get("config", {})}
    c = Consumer(conf)
    try:
        c.assign([TopicPartition(spec["topic"], p, 0) for p in range(spec["partitions"])])
        nxt = [0] * spec["partitions"]
        out["rss_before"] = _status_bytes("VmRSS")
        expected = spec["expected"]
        deadline = time.monotonic() + spec.get("timeout_s", 600)
        while out["records"] < expected and time.monotonic() < deadline:
            for r in c.consume(10000, timeout=1.0):
                p = r.partition
                if r.offset != nxt[p] or r.value[:10] != b"%010d" % r.offset:
                    if out["in_order"]:
                        out["first_disorder"] = [p, nxt[p], r.offset]
                    out["in_order"] = False
                nxt[p] = r.offset + 1
                out["records"] += 1
        out["next_offsets"] = nxt
    except Exception as exc:  # reported, not raised: the parent asserts on it
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        out["hwm"] = _status_bytes("VmHWM")
        c.close()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
