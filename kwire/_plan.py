"""The plan contract between kwire.protocol.schema (which builds plans) and both codec twins
(which interpret them).  It sits below both so the codec imports nothing from the protocol.

    plan = (ops, tagged_ops, flexible)
    op   = (code, name, nullable, default, sub, tag, flexible)
"""
from __future__ import annotations

from typing import Any, TypeAlias

# op = (code, name, nullable, default, sub, tag, flexible); sub is a Plan (T_STRUCT), an Op
# (T_ARRAY's element) or None.
Op: TypeAlias = "tuple[int, str, bool, Any, Any, int, bool]"
Plan: TypeAlias = "tuple[tuple[Op, ...], tuple[Op, ...], bool]"

# Type codes.  Small ints so the Cython interpreter can switch on them.
T_BOOL = 1
T_INT8 = 2
T_INT16 = 3
T_INT32 = 4
T_INT64 = 5
T_UINT16 = 6
T_UINT32 = 7
T_FLOAT64 = 8
T_STRING = 9
T_BYTES = 10
T_RECORDS = 11
T_UUID = 12
T_STRUCT = 13
T_ARRAY = 14


def struct_default(plan: Plan) -> dict[str, Any]:
    """The value a struct takes when every field is at its default."""
    out: dict[str, Any] = {}
    for op in plan[0] + plan[1]:
        code, name, nullable, default, sub = op[:5]
        if code == T_STRUCT and not nullable:
            out[name] = struct_default(sub)
        elif isinstance(default, list):
            out[name] = []
        else:
            out[name] = default
    return out
