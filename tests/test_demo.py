"""The README's main job, end to end: `python -m kwire demo` on its own embedded broker."""
import re
import subprocess
import sys

import pytest


@pytest.mark.parametrize("embedded", ["tansu", "kafka"])
def test_demo_reads_everything_then_nothing_new(embedded):
    proc = subprocess.run(
        [sys.executable, "-m", "kwire", "demo", "--records", "20000", "--partitions", "3", "--broker", embedded],
        capture_output=True, text=True, timeout=600, env={"COLUMNS": "120", **__import__("os").environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert ("Apache Kafka 4.3.1" if embedded == "kafka" else "Tansu") in proc.stderr
    assert "produced 20,000 records" in proc.stderr
    run1 = re.search(r"run 1: ([\d,]+) new records", out)
    run2 = re.search(r"run 2: ([\d,]+) new records", out)
    assert run1 and run1.group(1) == "20,000", out
    assert run2 and run2.group(1) == "0", out
    # per-partition and per-key tables, with totals that add up
    assert re.search(r"run 1: records per partition", out)
    totals = re.findall(r"total\s+│\s+([\d,]+)\s+│\s+([\d,]+)", out)
    assert ("20,000", "2,000,000") in totals, out
    # planning, the cold first action and the warm re-read, each timed on its own
    assert re.search(r"planning [\d.]+ s; first action \(starts Spark's Python workers\) [\d.]+ s "
                     r"\([\d,]+ records/s\); the same records read again [\d.]+ s \([\d,]+ records/s, "
                     r"steady state\)", out), out
