"""How a client's cost grows with partitions, record size and compression.

The sweeps run on the replay server (bench/replay_server.py), which answers Fetch from memory,
so what grows is the client's own cost; one point on Tansu is there for reference.  Results go
to ``bench/results/scaling.json``.  ``KWIRE_BENCH_SMOKE=1`` keeps the smallest point of each
sweep.

Each sweep holds the rest at the base point (3 partitions, 100 B values, no compression).
Record-size points keep the bytes roughly constant: ``KWIRE_BENCH_SCALING_RECORDS`` x 100 B,
between 1,000 and that many records.
"""
from __future__ import annotations

import uuid

from bench import harness

SETTINGS = harness.Settings.from_env()

BASE = {"partitions": 3, "value_bytes": 100, "compression": "none"}
SWEEPS = {
    "partitions": [1, 10, 100, 1000],
    "value_bytes": [10, 100, 1000, 10_000, 100_000],
    "compression": ["none", "gzip", "snappy", "lz4", "zstd"],
}
BROKER_POINT = {"target": "tansu", "partitions": 10, "value_bytes": 100, "compression": "none"}


def points(settings: harness.Settings) -> list[dict]:
    out, seen = [], set()
    for axis, values in SWEEPS.items():
        for value in (values[:1] if settings.smoke else values):
            point = dict(BASE, **{axis: value})
            budget = settings.scaling_records * 100
            records = settings.scaling_records if point["value_bytes"] <= 100 else \
                max(min(settings.scaling_records, 1000), budget // point["value_bytes"])
            point["records"] = records
            key = tuple(sorted(point.items()))
            sweeps = [axis]
            if key in seen:
                for p in out:
                    if tuple(sorted((k, v) for k, v in p.items() if k != "sweeps")) == key:
                        p["sweeps"].append(axis)
                continue
            seen.add(key)
            point["sweeps"] = sweeps
            out.append(point)
    return out


def _run_point(target, point, settings, clients, extra) -> list[dict]:
    wanted = harness.Dataset(f"bench-scale-{uuid.uuid4().hex[:8]}", point["partitions"], point["records"],
                             point["value_bytes"], point["compression"])
    ds = target.prepare(wanted)
    return harness.run_matrix(target, ds, clients, settings, extra=extra, repeat=settings.scaling_repeat)


def test_scaling():
    settings = SETTINGS
    runs = []
    pts = points(settings)
    print(f"\nscaling: {len(pts)} points x {len(settings.scaling_clients)} clients on the replay server")
    with harness.open_target("replay") as replay:
        for point in pts:
            extra = {"sweeps": point["sweeps"]}
            runs += _run_point(replay, point, settings, settings.scaling_clients, extra)
    bp = dict(BROKER_POINT)
    bp["records"] = settings.scaling_records
    bp["partitions"] = 1 if settings.smoke else bp["partitions"]
    with harness.open_target(bp["target"]) as broker:
        runs += _run_point(broker, bp, settings, settings.scaling_clients, {"sweeps": ["reference"]})
    doc = {"base": BASE, "sweeps": SWEEPS if not settings.smoke else {k: v[:1] for k, v in SWEEPS.items()},
           "broker_point": bp, "runs": runs}
    path = harness.write_results(settings, "scaling", doc)
    saved = harness.json.loads(path.read_text())
    assert not harness.check_results_doc(saved), harness.check_results_doc(saved)
    assert any(r["ok"] for r in runs), harness.runs_summary(runs)
