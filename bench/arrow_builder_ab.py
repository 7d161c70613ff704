"""A/B timing of the Arrow path in memory (issue #16): decode_columns + the Arrow builder over
1M records (100 chunks of 10 batches of 1,000), and the Spark reader's read_committed path
(3 runs per chunk).  Before/after trees in separate processes, interleaved, medians of 5;
each process reports its best of 3 in CPU seconds (the machine is shared).

    python bench/arrow_builder_ab.py BEFORE_TREE AFTER_TREE

A tree is a checkout with its extension built (``python setup.py build_ext --inplace``).  The
builder's API changed in #16 (``to_record_batch`` lost ``include_headers``, ``decode_columns``
gained ``ranges=``): the child detects which one it runs.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

PER_BATCH = 1000
BATCHES = 10
CHUNKS = 100


def _best(fn) -> float:
    fn()
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def child() -> None:
    from kwire import records
    from kwire.spark import arrow as sa

    recs = [(b"key-%06d" % i, b"v" * 80 + b"%06d" % i, [("trace", b"t%d" % i)] if i % 4 == 0 else [],
             1_700_000_000_000 + i) for i in range(PER_BATCH)]
    chunks = [memoryview(b"".join(records.build_batch(recs, (c * BATCHES + b) * PER_BATCH)
                                  for b in range(BATCHES))) for c in range(CHUNKS)]
    per_chunk = PER_BATCH * BATCHES
    new_api = "schema" in (records.to_arrow.__kwdefaults__ or {})

    def spark(cols, lo, until, headers):
        schema = sa.kafka_arrow_schema(headers)
        if new_api:
            return sa.to_record_batch(cols, "t", 0, lo, until, schema)
        return sa.to_record_batch(cols, "t", 0, lo, until, schema, headers)

    pre = [records.decode_columns(c) for c in chunks]
    runs_of = [records.record_runs(records.scan_spans(c), {1, 2, 5, 8}) for c in chunks]

    def read_committed():
        n = 0
        for c, runs in zip(chunks, runs_of):
            if new_api:
                n += spark(records.decode_columns(c, True, ranges=runs), 0, 1 << 40, False).num_rows
            else:
                n += sum(spark(records.decode_columns(c[a:b], True), 0, 1 << 40, False).num_rows
                         for a, b in runs)
        assert n == CHUNKS * 6 * PER_BATCH

    def decode_and(build):
        def run():
            for k, c in enumerate(chunks):
                build(records.decode_columns(c), k * per_chunk)
        return run

    cases = {
        "build to_arrow": lambda: [records.to_arrow(c, topic="t", partition=0) for c in pre],
        "build spark+headers": lambda: [spark(c, 1, 1 << 40, True) for c in pre],
        "decode only": decode_and(lambda cols, base: None),
        "decode + to_arrow": decode_and(lambda cols, base: records.to_arrow(cols, topic="t", partition=0)),
        "decode + spark": decode_and(lambda cols, base: spark(cols, base + 1, base + per_chunk - 1, False)),
        "decode + spark+headers": decode_and(lambda cols, base: spark(cols, base + 1, base + per_chunk - 1, True)),
        "read_committed 3 runs": read_committed,
    }
    print(json.dumps({name: _best(fn) for name, fn in cases.items()}))


def main(before: str, after: str) -> None:
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(5):
        for label, tree in (("before", before), ("after", after)):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            env.pop("KWIRE_PURE", None)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                                 cwd="/", capture_output=True, text=True, check=True)
            runs[label].append(json.loads(out.stdout))
    for case in runs["before"][0]:
        b = statistics.median(r[case] for r in runs["before"])
        a = statistics.median(r[case] for r in runs["after"])
        print(f"{case:24s} before {b * 1000:7.1f} ms  after {a * 1000:7.1f} ms  after/before {a / b:.3f}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        main(sys.argv[1], sys.argv[2])
