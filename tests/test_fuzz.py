"""The fuzz harnesses (fuzz/) run for a few seconds each in the default test run: the message
decoders under both codec twins and the frame reader.  atheris (coverage-guided) when it is
installed, else the harnesses' own random-mutation loop.  A crash, a hang (the subprocess
timeout) or memory out of proportion to the input fails the test; its output names the input
(atheris writes it as crash-*/oom-* in the working directory)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 7

try:
    import atheris  # noqa: F401
    HAVE_ATHERIS = True
except ImportError:
    HAVE_ATHERIS = False


@pytest.mark.parametrize("harness, env, extra", [
    ("fuzz_decode.py", {}, []),
    ("fuzz_decode.py", {"KWIRE_PURE": "1"}, []),
    ("fuzz_framing.py", {}, ["-max_len=70100"]),
], ids=["decode-cython", "decode-pure", "framing"])
def test_fuzz_harness(harness, env, extra, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    args = [sys.executable, str(ROOT / "fuzz" / harness), f"-max_total_time={SECONDS}", "-rss_limit_mb=4096",
            "-timeout=10", *extra, str(corpus)]
    if not HAVE_ATHERIS:
        args.append("--plain")
    proc = subprocess.run(args, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=SECONDS + 60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert ("Done " in out) or ("no failure" in out), out[-2000:]
    if env.get("KWIRE_PURE"):
        assert "fuzzing the python codec" in out
    elif harness == "fuzz_decode.py":
        assert "fuzzing the cython codec" in out or "fuzzing the python codec" in out
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("oom-*"))


def test_a_frame_claiming_2gb_allocates_what_arrives_not_what_it_claims():
    import struct
    import tracemalloc

    from kwire.net.framing import FrameReader
    r = FrameReader(0x7FFFFFFF)  # even with the limit at its maximum
    tracemalloc.start()
    try:
        assert r.feed(struct.pack(">i", 0x7FFFFFFF - 1) + b"x" * 10) == []
        assert r.mid_frame
        for _ in range(100):
            r.feed(b"y" * 10_000)  # 1 MB arrives: the buffer follows it, doubling
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    # and a frame that completes comes out whole and exact
    r = FrameReader(1 << 30)
    payload = bytes(range(256)) * 4000
    got = []
    data = struct.pack(">i", len(payload)) + payload
    for i in range(0, len(data), 777):
        got += r.feed(data[i:i + 777])
    assert got == [payload] and len(got[0]) == len(payload)
