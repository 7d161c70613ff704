"""kwire's message-schema format: every Kafka request/response declared once, as data.

A message is a tree of fields.  Each field carries the version range it exists in
(Kafka's own notation: ``"3+"``, ``"0-4"``, ``"none"``), the versions in which it may be
null, and, for tagged fields, its tag.  One declaration serves every version; the codec
never has a hand-written class per version.

From a declaration we *compile* a plan for one (message, version): a flat tuple of
operations that both codec twins (``kwire._codec`` in Cython, ``kwire._pycodec`` in pure
Python) interpret.  Plans are cached; building one is pure Python and happens once.

Plan layout (shared contract between the twins; change both if you change this)::

    plan  = (ops, tagged_ops, flexible)
    ops   = tuple of op, in wire order
    tagged_ops = tuple of op with a tag, sorted by tag (empty when not flexible)
    op    = (code, name, nullable, default, sub, tag, flexible)
            code     -- one of the T_* constants below
            name     -- the dict key in decoded messages (snake_case)
            nullable -- bool, for this version
            default  -- Python value used when encoding a dict that lacks ``name``
            sub      -- for T_STRUCT: a plan; for T_ARRAY: an element op; else None
            tag      -- int for tagged fields, else -1
            flexible -- bool: compact encodings for this field (usually the message's)

Decoded messages are plain dicts keyed by snake_case field names.  Unknown tagged fields
(a newer broker's additions) are kept as ``{"_unknown_tags": {tag: bytes}}`` so a decode →
encode round trip is lossless.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from .._plan import (  # noqa: F401  (re-exported: the plan contract lives below the codec)
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
    Op,
    Plan,
    struct_default,
)

PRIMITIVES = {
    "bool": T_BOOL,
    "int8": T_INT8,
    "int16": T_INT16,
    "int32": T_INT32,
    "int64": T_INT64,
    "uint16": T_UINT16,
    "uint32": T_UINT32,
    "float64": T_FLOAT64,
    "string": T_STRING,
    "bytes": T_BYTES,
    "records": T_RECORDS,
    "uuid": T_UUID,
}

ZERO_UUID = uuid.UUID(int=0)

_MAX_VERSION = 0x7FFF


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """Kafka's version notation -> inclusive (lo, hi); ``None`` for "none"/absent."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), _MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    v = int(spec)
    return v, v


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def snake(name: str) -> str:
    """``PartitionIndex`` -> ``partition_index``; ``TopicID``/``TopicId`` -> ``topic_id``."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


@dataclass(frozen=True)
class Field:
    """One field of a message or struct, as the Kafka spec declares it."""

    name: str  # Kafka's CamelCase name; decoded dict keys use snake(name)
    type: str  # "int32", "string", "[]int32", "[]SomeStruct", "SomeStruct", ...
    versions: str  # e.g. "0+", "3-7"
    nullable: str | None = None  # nullableVersions
    tag: int | None = None
    tagged: str | None = None  # taggedVersions
    default: Any = None  # already a Python value; None means "type's zero" unless nullable
    has_default: bool = False
    flexible: str | None = "inherit"  # field-level flexibleVersions override ("none" for ClientId)
    fields: tuple[Field, ...] = ()

    @property
    def key(self) -> str:
        return snake(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass(frozen=True)
class Message:
    name: str
    kind: str  # "request" | "response" | "header" | "data"
    valid: str
    flexible: str
    fields: tuple[Field, ...]
    api_key: int | None = None
    notes: str = ""  # version history worth keeping next to the schema
    # The versions kwire's client may pick from what a broker offers; None = all of ``valid``.
    # The rest of ``valid`` (versions Kafka 4.0 removed, unstable ones) is for decoding only.
    negotiable: str | None = None

    @property
    def valid_range(self) -> tuple[int, int]:
        r = parse_versions(self.valid)
        assert r is not None
        return r

    @property
    def negotiable_range(self) -> tuple[int, int] | None:
        """Inclusive (lo, hi) kwire's client negotiates within; None if it never sends it."""
        return self.valid_range if self.negotiable is None else parse_versions(self.negotiable)

    def is_flexible(self, version: int) -> bool:
        return _in(parse_versions(self.flexible), version)


def F(name: str, type: str, versions: str = "0+", *, nullable: str | None = None,
      default: Any = None, tag: int | None = None, tagged: str | None = None,
      flexible: str | None = "inherit", fields: tuple[Field, ...] | list[Field] = ()) -> Field:
    """Declare a field (used by the transcribed message tables)."""
    return Field(name=name, type=type, versions=versions, nullable=nullable, tag=tag,
                 tagged=tagged, default=default, has_default=default is not None or nullable is not None,
                 flexible=flexible, fields=tuple(fields))


def zero_value(type_name: str, nullable: bool) -> Any:
    if nullable:
        return None
    if type_name.startswith("[]"):
        return []
    return {
        "bool": False,
        "string": "",
        "bytes": b"",
        "records": b"",
        "uuid": ZERO_UUID,
        "float64": 0.0,
    }.get(type_name, 0)


class SchemaError(Exception):
    """A declaration is inconsistent (a bug in the tables, caught when a plan is built)."""


def _elem_op(f: Field, elem: str, flexible: bool, version: int) -> Op:
    if elem in PRIMITIVES:
        return (PRIMITIVES[elem], f.key, False, zero_value(elem, False), None, -1, flexible)
    if not f.fields:
        raise SchemaError(f"{f.name}: struct type {elem} has no fields")
    return (T_STRUCT, f.key, False, None, build_plan(f.fields, version, flexible), -1, flexible)


def _field_op(f: Field, version: int, msg_flexible: bool) -> Op:
    flexible = msg_flexible
    if f.flexible != "inherit":
        flexible = msg_flexible and _in(parse_versions(f.flexible), version)
    nullable = _in(parse_versions(f.nullable), version)
    tag = f.tag if (msg_flexible and f.tag is not None and _in(parse_versions(f.tagged), version)) else -1
    default = f.default if f.has_default and f.default is not None else zero_value(f.type, nullable)
    if f.has_default and f.default is None and not nullable:
        default = zero_value(f.type, False)
    if f.is_array:
        elem = _elem_op(f, f.elem_type, flexible, version)
        return (T_ARRAY, f.key, nullable, default, elem, tag, flexible)
    if f.type in PRIMITIVES:
        return (PRIMITIVES[f.type], f.key, nullable, default, None, tag, flexible)
    if not f.fields:
        raise SchemaError(f"{f.name}: struct type {f.type} has no fields")
    sub = build_plan(f.fields, version, flexible)
    return (T_STRUCT, f.key, nullable, default if nullable else None, sub, tag, flexible)


def build_plan(fields: tuple[Field, ...], version: int, flexible: bool) -> Plan:
    ops: list[Op] = []
    tagged: list[Op] = []
    for f in fields:
        if not _in(parse_versions(f.versions), version):
            continue
        op = _field_op(f, version, flexible)
        if op[5] >= 0:
            tagged.append(op)
        else:
            ops.append(op)
    tagged.sort(key=lambda o: o[5])
    return (tuple(ops), tuple(tagged), flexible)
