"""Shared by the fuzz harnesses: the memory budget and the seed corpus.

Each harness runs under atheris (coverage-guided, libFuzzer) when it is installed, else under a
plain random-mutation loop with the same checks (``--plain``), so a machine without atheris
still fuzzes.  Both stop after ``-max_total_time`` seconds.
"""
from __future__ import annotations

import os
import random
import resource
import struct
import sys
import tracemalloc

# An input may cost this much Python memory per byte (decoded dicts and lists are big) plus a
# fixed allowance; a forged length or count that allocated what it claims would blow it.
BYTES_PER_INPUT_BYTE = 4096
FIXED_ALLOWANCE = 8 << 20
# And the whole process stays under this address-space limit: an allocation of gigabytes
# fails with MemoryError, which the harness reports as a crash.
ADDRESS_SPACE_LIMIT = 6 << 30


def limit_memory() -> None:
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = ADDRESS_SPACE_LIMIT if hard == resource.RLIM_INFINITY else min(hard, ADDRESS_SPACE_LIMIT)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass
    tracemalloc.start()


def check_memory(data_len: int) -> None:
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    budget = FIXED_ALLOWANCE + BYTES_PER_INPUT_BYTE * data_len
    if peak > budget:
        raise AssertionError(f"an input of {data_len} bytes made the decoder allocate {peak} bytes")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def run(test_one_input, seeds, argv=None) -> None:
    """atheris when available and not ``--plain``, else a random-mutation loop."""
    argv = list(sys.argv if argv is None else argv)
    plain = "--plain" in argv
    argv = [a for a in argv if a != "--plain"]
    seconds = 10.0
    for a in argv:
        if a.startswith("-max_total_time="):
            seconds = float(a.split("=", 1)[1])
    if not plain:
        try:
            import atheris
        except ImportError:
            plain = True
    if not plain:
        corpus = None
        for a in argv[1:]:
            if not a.startswith("-") and os.path.isdir(a):
                corpus = a
        if corpus is not None and not os.listdir(corpus):
            for i, s in enumerate(seeds):
                with open(os.path.join(corpus, f"seed-{i:04d}"), "wb") as f:
                    f.write(s)
        atheris.Setup(argv, test_one_input)
        atheris.Fuzz()
        return
    import time
    rng = random.Random(int(os.environ.get("FUZZ_SEED", "1")))
    end = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < end:
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 8)):
            op = rng.randrange(4)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1:
                pos = rng.randrange(len(data) + 1)
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
            elif op == 2 and data:
                pos = rng.randrange(len(data))
                del data[pos:pos + rng.randrange(1, 9)]
            elif data:  # a length or count field claiming a lot
                pos = rng.randrange(len(data))
                data[pos:pos + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x00\x10\x00\x00",
                                                b"\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x08"])[:4]
        test_one_input(bytes(data))
        runs += 1
    print(f"plain fuzzing: {runs} inputs in {seconds:.0f} s, no failure", flush=True)
