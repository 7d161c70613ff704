"""kwire/protocol/bodies.py, the TypedDicts of message bodies (tools/gen_message_types.py).

* the checked-in file is what the generator writes from today's schema;
* what the codec decodes conforms to the types: every message (requests, responses, headers,
  the consumer protocol's payloads) at every version, with default and random values, decodes
  to keys its TypedDict declares (recursively) holding values of the declared types;
* a type checker uses them: mypy rejects a misspelled key and a misused value.
"""
from __future__ import annotations

import importlib.util
import os
import random
import types
import typing
import uuid

import pytest

from kwire.protocol import bodies
from kwire.protocol import messages as M
from kwire.protocol.schema import Message, build_plan, struct_default

from .protocol_values import sample_struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_message_types", os.path.join(ROOT, "tools", "gen_message_types.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_file_is_up_to_date():
    with open(bodies.__file__, encoding="utf-8") as fh:
        current = fh.read()
    assert current == _generator().render(), "run python tools/gen_message_types.py"


MESSAGES = [v for n in M.__all__ if isinstance(v := getattr(M, n), Message)]
_KEYS = {(m.name, m.kind): key for key, m in
         [((name, "request"), req) for name, req, _ in M.APIS.values()]
         + [((name, "response"), resp) for name, _, resp in M.APIS.values()]
         + [((m.name, m.kind), m) for m in MESSAGES if m.kind in ("header", "data")]}


def test_every_message_has_its_type():
    assert len(bodies.BODY_TYPES) == len(MESSAGES)
    for m in MESSAGES:
        assert bodies.BODY_TYPES[_KEYS[(m.name, m.kind)]].__name__ == m.name
    assert bodies.response("Fetch", {"x": 1}) == {"x": 1}  # unchanged, only typed
    with pytest.raises(KeyError):
        bodies.request("NoSuchApi", {})  # type: ignore[call-overload]


_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _problems(value, hint, where: str) -> list[str]:
    """What in ``value`` the type ``hint`` does not allow (empty when it conforms)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        found = [_problems(value, h, where) for h in typing.get_args(hint)]
        return [] if any(not p for p in found) else min(found, key=len)
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__} is not a list"]
        (elem,) = typing.get_args(hint)
        return [p for i, v in enumerate(value) for p in _problems(v, elem, f"{where}[{i}]")]
    if origin is dict:
        return [] if isinstance(value, dict) else [f"{where}: not a dict"]
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} is not a dict ({hint.__name__})"]
        declared = _hints(hint)
        out = [f"{where}.{k}: not declared in {hint.__name__}" for k in value if k not in declared]
        for k, v in value.items():
            if k in declared:
                out += _problems(v, declared[k], f"{where}.{k}")
        return out
    assert hint in (int, float, bool, str, bytes, memoryview, uuid.UUID), hint
    ok = isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
    return [] if ok else [f"{where}: {type(value).__name__} {value!r:.40} is not {hint.__name__}"]


@pytest.mark.parametrize("message", MESSAGES, ids=[f"{m.name}" for m in MESSAGES])
def test_decoded_bodies_conform_to_their_types(codec, message):
    cls = bodies.BODY_TYPES[_KEYS[(message.name, message.kind)]]
    lo, hi = message.valid_range
    for v in range(lo, hi + 1):
        plan = build_plan(message.fields, v, message.is_flexible(v))
        rng = random.Random(f"{message.name}/{v}")
        values = [struct_default(plan)] + [sample_struct(plan, rng) for _ in range(3)]
        if message.is_flexible(v):
            values[-1]["_unknown_tags"] = {999: b"\x01"}
        for value in values:
            body = codec.decode_message(plan, codec.encode_message(plan, value))
            assert _problems(body, cls, f"{message.name} v{v}") == []


def test_the_checker_sees_a_wrong_key_and_a_wrong_type():
    """The conformance check above can fail (else it proves nothing)."""
    good = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 1}]}]}
    assert _problems(good, bodies.ListOffsetsResponse, "r") == []
    typo = {"topics": [{"name": "t", "partitions": [{"partition_indx": 0}]}]}
    assert _problems(typo, bodies.ListOffsetsResponse, "r") == [
        "r.topics[0].partitions[0].partition_indx: not declared in ListOffsetsResponsePartitionResponse"]
    wrong = {"topics": [{"name": b"t", "partitions": None}]}
    assert len(_problems(wrong, bodies.ListOffsetsResponse, "r")) == 2


SNIPPET = '''\
from typing import Any

from kwire.protocol import bodies


def offsets(data: dict[str, Any]) -> list[int]:
    resp = bodies.response("ListOffsets", data)
    return [p["offset"] for t in resp["topics"] for p in t["partitions"]]


def misspelled(data: dict[str, Any]) -> object:
    resp = bodies.response("ListOffsets", data)
    return resp["topics"][0]["partitions"][0]["ofset"]  # line 13


def misused(data: dict[str, Any]) -> object:
    resp = bodies.response("Fetch", data)
    return resp["responses"][0]["topic"] + 1  # line 18
'''


def test_mypy_rejects_misused_keys(tmp_path, monkeypatch):
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    monkeypatch.chdir(tmp_path)  # (not the project's config: only the snippet is checked)
    monkeypatch.setenv("MYPYPATH", ROOT)
    out, err, status = api.run([str(path), "--strict", "--follow-imports=silent",
                                "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"])
    errors = [ln for ln in out.splitlines() if ": error:" in ln]
    assert status == 1, out + err
    assert len(errors) == 2, out
    assert errors[0].startswith("snippet.py:13:") and '"ofset"' in errors[0], out
    assert errors[0].endswith("[typeddict-item]"), out
    assert errors[1].startswith("snippet.py:18:") and errors[1].endswith("[operator]"), out


def test_no_runtime_module_imports_the_types():
    """The TypedDicts are for type checkers: importing them costs ~0.1 s (507 classes), which a
    cold job (a CLI call, a Spark driver's planning) would pay.  kwire's modules name them
    under TYPE_CHECKING only."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import kwire.admin, kwire.cli, kwire.confluent, kwire.consumer.consumer, kwire.spark\n"
            "import kwire.commands.groups, kwire.debug.render\n"
            "print('kwire.protocol.bodies' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
