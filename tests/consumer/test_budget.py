"""Memory stays within queued.max.messages.kbytes whatever the compression (issue 14, defect 7).

On Apache Kafka, a backlog whose decompressed size is far above the budget (zstd or gzip,
compressible values, as confluent-kafka's producer batches them) is read by a consumer in a
process of its own (tests/consumer/budget_member.py): every record once and in order, and the
process's peak resident set (VmHWM) grows by at most the budget + SLACK over its resident set
before the first record.  Before the fetcher budgeted decoded bytes, the 2M x 1 KB zstd backlog
took ~1.1 GB at the default budget.

SLACK covers what is not the consumer's buffering: the batch being decoded (decompressed whole:
~1 MB here, at most fetch.max.decompressed.bytes), the interpreter's and the allocator's
growth while records come and go, the network client's receive buffer.  Measured growth of
the 2M x 1 KB zstd backlog (base = before the change, interleaved in one run): 40 MiB at the
default 64 MiB budget (base 402 MiB; 1096 MiB in another run, batching differs), 23 MiB at
16 MiB (base 455), 11 MiB at 4 MiB (base 398), 7.8 MiB at 1 MiB (base 302); with the final
split (8 MiB decode-ahead, 8 MiB worker): 30 MiB at 64 MiB, 13 MiB at 4 MiB.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest

ROOT = Path(__file__).resolve().parents[2]
SLACK = 12 << 20


def _produce(peer, topic, n, value_bytes, compression):
    p = confluent_kafka.Producer({"bootstrap.servers": peer.bootstrap, "compression.type": compression,
                                  "linger.ms": 100, "batch.size": 1_000_000,
                                  "queue.buffering.max.kbytes": 1 << 20})
    filler = b"a" * (value_bytes - 10)
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%010d" % i + filler, partition=0)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(120) == 0


def _member(peer, topic, n, config):
    spec = {"bootstrap": peer.bootstrap, "topic": topic, "partitions": 1, "expected": n,
            "config": config, "timeout_s": 300}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "tests.consumer.budget_member", json.dumps(spec)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
                         check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"the member exited {out.returncode} without a result: {out.stderr[-3000:]}"
    return json.loads(lines[0][len("RESULT "):])


@pytest.mark.parametrize("compression,n,value_bytes,budget_kib", [
    ("zstd", 2_000_000, 1024, None),    # the backlog at the default budget (64 MiB)
    ("zstd", 400_000, 1024, 8192),
    ("gzip", 300_000, 1024, 8192),
    ("zstd", 2_000_000, 10, 8192),      # tiny records: the cost is Python objects, not bytes
], ids=["zstd-2M-1KB-default", "zstd-400k-1KB-8MiB", "gzip-300k-1KB-8MiB", "zstd-2M-10B-8MiB"])
def test_backlog_far_above_the_budget_is_read_within_it(kafka, unique_topic, create_topic,
                                                        compression, n, value_bytes, budget_kib):
    create_topic(kafka, unique_topic, 1)
    _produce(kafka, unique_topic, n, value_bytes, compression)
    config = {} if budget_kib is None else {"queued.max.messages.kbytes": budget_kib}
    budget = (budget_kib or 65536) * 1024
    # decompressed, the records (bytes plus a Python object each) are many budgets
    assert n * (value_bytes + 100) > 8 * budget
    res = _member(kafka, unique_topic, n, config)
    assert res["error"] is None
    assert (res["records"], res["in_order"], res["next_offsets"]) == (n, True, [n]), res
    growth = res["hwm"] - res["rss_before"]
    assert growth <= budget + SLACK, (
        f"peak RSS grew by {growth / 2**20:.1f} MiB with a {budget / 2**20:.0f} MiB budget")


def test_backlog_on_tansu_is_read_within_the_budget(tansu, unique_topic, create_topic):
    """The same on Tansu, whose Fetch answers are its own (one case: zstd at 8 MiB)."""
    n, budget_kib = 300_000, 8192
    create_topic(tansu, unique_topic, 1)
    _produce(tansu, unique_topic, n, 1024, "zstd")
    res = _member(tansu, unique_topic, n, {"queued.max.messages.kbytes": budget_kib})
    assert res["error"] is None
    assert (res["records"], res["in_order"], res["next_offsets"]) == (n, True, [n]), res
    growth = res["hwm"] - res["rss_before"]
    assert growth <= budget_kib * 1024 + SLACK, f"peak RSS grew by {growth / 2**20:.1f} MiB"
