"""Random, valid message values for a plan: the input of the round-trip and golden tests."""
from __future__ import annotations

import random
import uuid

from kwire.protocol.schema import (
    T_ARRAY,
    T_BOOL,
    T_BYTES,
    T_FLOAT64,
    T_INT8,
    T_INT16,
    T_INT32,
    T_INT64,
    T_RECORDS,
    T_STRING,
    T_STRUCT,
    T_UINT16,
    T_UINT32,
    T_UUID,
    struct_default,
)

_RANGES = {
    T_INT8: (-(1 << 7), (1 << 7) - 1),
    T_INT16: (-(1 << 15), (1 << 15) - 1),
    T_INT32: (-(1 << 31), (1 << 31) - 1),
    T_INT64: (-(1 << 63), (1 << 63) - 1),
    T_UINT16: (0, (1 << 16) - 1),
    T_UINT32: (0, (1 << 32) - 1),
}
_WORDS = ["", "a", "topic-1", "ünïcødé", "x" * 40, "group.with.dots"]


def sample_value(op, rng: random.Random, depth: int = 0):
    code, name, nullable, default, sub, tag, flexible = op
    if nullable and rng.random() < 0.15:
        return None
    if code in _RANGES:
        lo, hi = _RANGES[code]
        return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])
    if code == T_BOOL:
        return rng.random() < 0.5
    if code == T_FLOAT64:
        return rng.choice([0.0, 1.5, -2.25, 1e300])
    if code == T_STRING:
        return rng.choice(_WORDS)
    if code in (T_BYTES, T_RECORDS):
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 33])))
    if code == T_UUID:
        return uuid.UUID(int=rng.getrandbits(128))
    if code == T_STRUCT:
        return sample_struct(sub, rng, depth + 1)
    if code == T_ARRAY:
        n = rng.choice([0, 1, 2, 3]) if depth < 4 else 0
        if sub[0] == T_STRUCT:
            return [sample_struct(sub[4], rng, depth + 1) for _ in range(n)]
        return [sample_value(sub, rng, depth + 1) for _ in range(n)]
    raise AssertionError(code)


def sample_struct(plan, rng: random.Random, depth: int = 0) -> dict:
    ops, tagged_ops, flexible = plan
    out = {op[1]: sample_value(op, rng, depth) for op in ops}
    for op in tagged_ops:
        if rng.random() < 0.5:
            out[op[1]] = sample_value(op, rng, depth)
        else:
            out[op[1]] = struct_default(op[4]) if op[0] == T_STRUCT and not op[2] else (
                [] if isinstance(op[3], list) else op[3])
    return out
