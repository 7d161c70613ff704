"""Fuzz the message decoders: kwire.protocol.decode_request (api and version from the frame's
own header) and decode_response (api and version chosen by the input's first bytes).

    python fuzz/fuzz_decode.py -max_total_time=10 -rss_limit_mb=4096 CORPUS_DIR
    KWIRE_PURE=1 python fuzz/fuzz_decode.py ...      # the pure-Python twin
    python fuzz/fuzz_decode.py --plain -max_total_time=10   # without atheris

Any exception other than kwire.errors.KwireError is a bug (an IndexError, a struct.error, a
RecursionError...), and so is memory out of proportion to the input (a length field claiming
2 GB must not allocate it).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common  # noqa: E402  (fuzz/ is on sys.path when run as a script)

try:
    import atheris
    with atheris.instrument_imports(include=["kwire"]):
        from kwire.errors import KwireError
        from kwire.protocol import api as P
except ImportError:
    from kwire.errors import KwireError
    from kwire.protocol import api as P

KEYS = sorted(P.APIS)


def seeds() -> list[bytes]:
    import random

    from tests.protocol_values import sample_struct
    rng = random.Random(5)
    out = []
    for key in KEYS:
        a = P.APIS[key]
        for v in sorted({a.oldest_version, a.newest_version, (a.oldest_version + a.newest_version) // 2}):
            try:
                body = sample_struct(P.request_plan(a, v), rng)
                out.append(b"Q" + P.encode_request(a, v, body, correlation_id=7, size_prefix=False))
                body = sample_struct(P.response_plan(a, v), rng)
                out.append(b"R" + bytes([KEYS.index(key), v]) + P.encode_response(a, v, body, correlation_id=7,
                                                                                    size_prefix=False))
            except Exception:
                continue
    return out


def test_one_input(data: bytes) -> None:
    if len(data) < 1:
        return
    try:
        if data[0] % 2 == 1:  # "Q" (0x51) and other odd bytes: a request
            P.decode_request(data[1:], size_prefix=False)
        else:
            if len(data) < 3:
                return
            a = P.APIS[KEYS[data[1] % len(KEYS)]]
            lo, hi = a.oldest_version, a.newest_version  # every version kwire decodes
            P.decode_response(a, lo + data[2] % (hi - lo + 1), data[3:], size_prefix=False)
    except KwireError:
        pass
    _common.check_memory(len(data))


if __name__ == "__main__":
    _common.limit_memory()
    sys.setrecursionlimit(10_000)
    print(f"fuzzing the {P._codec.IMPLEMENTATION} codec", flush=True)
    _common.run(test_one_input, seeds())
