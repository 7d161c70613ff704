"""bench.harness.run_matrix's rounds: the warm-up round goes first, round robin over the
clients, and stays out of each client's median (kept beside it in the JSON).  The client runs
themselves are the smoke test's (tests/test_bench_smoke.py); here they are stood in for, so
that which run is chosen can be asserted exactly."""
from __future__ import annotations

from types import SimpleNamespace

from bench import harness

TARGET = SimpleNamespace(name="t")


def test_the_warm_up_round_goes_first_and_stays_out_of_the_median(monkeypatch):
    calls: list[str] = []
    # a: the warm-up run is the slowest (a cold broker) and would be the median of all four
    rates = {"a": [1.0, 5.0, 3.0, 4.0], "b": [2.0, 2.0, 6.0, 1.0]}

    def fake_run_client(client, target, ds, settings, **_kw):
        i = sum(1 for c in calls if c == client)
        calls.append(client)
        return harness.RunResult(client, "t", {}, True, records=10,
                                 metrics={"records_per_s": rates[client][i]})

    monkeypatch.setattr(harness, "run_client", fake_run_client)
    settings = harness.Settings.from_env()
    runs = harness.run_matrix(TARGET, object(), ["a", "b"], settings, repeat=3, warmup_rounds=1,
                              log=lambda *_: None)
    assert calls == ["a", "b"] * 4                       # round robin, the warm-up round first
    by = {r["client"]: r for r in runs}
    assert by["a"]["metrics"]["records_per_s"] == 4.0    # median of 5, 3, 4 (with 1.0 it is 3.0)
    assert by["b"]["metrics"]["records_per_s"] == 2.0    # median of 2, 6, 1
    assert [w["records_per_s"] for w in by["a"]["warmup"]] == [1.0]
    assert [x["records_per_s"] for x in by["a"]["repeats"]] == [5.0, 3.0, 4.0]
    calls.clear()
    without = harness.run_matrix(TARGET, object(), ["a"], settings, repeat=1, log=lambda *_: None)
    assert "warmup" not in without[0]
