"""End to end: every client consumes the same topic on the same target, each in its own process.

One test per target (Tansu, librdkafka's mock cluster, the replay server); each writes
``bench/results/e2e-<target>.json``.  Sizes come from the environment (bench/harness.py,
:class:`~bench.harness.Settings`); ``KWIRE_BENCH_SMOKE=1`` makes it a quick check.

A client that fails (not ready, or broken against this peer) is recorded as failed with its
error; the others still run.  Nothing here asserts on speed.
"""
from __future__ import annotations

import uuid

import pytest

from bench import harness

SETTINGS = harness.Settings.from_env()


@pytest.mark.parametrize("target_name", SETTINGS.targets)
def test_e2e(target_name):
    settings = SETTINGS
    with harness.open_target(target_name) as target:
        wanted = harness.Dataset(f"bench-e2e-{uuid.uuid4().hex[:8]}", settings.partitions, settings.records,
                                 settings.value_bytes)
        ds = target.prepare(wanted)
        print(f"\n{target_name}: {ds.records:,} records x {ds.value_bytes} B on {ds.partitions} partitions")
        runs = harness.run_matrix(target, ds, settings.clients, settings,
                                  warmup_rounds=settings.warmup_rounds)
        described = target.describe()
    path = harness.write_results(settings, f"e2e-{target_name}", {
        "target": described, "dataset": ds.to_json(), "requested_dataset": wanted.to_json(), "runs": runs})
    doc = harness.json.loads(path.read_text())
    assert not harness.check_results_doc(doc), harness.check_results_doc(doc)
    assert any(r["ok"] for r in runs), harness.runs_summary(runs)
