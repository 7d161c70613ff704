"""kwire/_codec.pyi describes what the compiled codec exports, and the pure twin has the same
functions: the stub cannot drift from either."""
import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import kwire
import kwire._codec as compiled  # the built extension (CI requires it)
import kwire._pycodec as pure

ROOT = Path(kwire.__file__).parent
STUB = ROOT / "_codec.pyi"
ALLOWLIST = Path(__file__).parent / "codec_stub_allowlist.txt"


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text())


def _stub_functions() -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in _stub_tree().body if isinstance(n, ast.FunctionDef)}


def _stub_classes() -> dict[str, ast.ClassDef]:
    return {n.name: n for n in _stub_tree().body if isinstance(n, ast.ClassDef)}


def _stub_public_names() -> set[str]:
    names = set()
    for node in _stub_tree().body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname for a in node.names if a.asname == a.name)
    return {n for n in names if not n.startswith("_")}


def _params(fn: ast.FunctionDef) -> list[tuple[str, str, object]]:
    """(name, kind, default) of a stub function, as inspect would say them."""
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults)) + \
        [ast.literal_eval(d) for d in a.defaults]
    for i, p in enumerate(positional):
        kind = "POSITIONAL_ONLY" if p in a.posonlyargs else "POSITIONAL_OR_KEYWORD"
        out.append((p.arg, kind, defaults[i]))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, "KEYWORD_ONLY", inspect.Parameter.empty if d is None else ast.literal_eval(d)))
    return [x for x in out if x[0] != "self"]


def _runtime_params(fn) -> list[tuple[str, str, object]]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


def test_stubtest_finds_the_stub_and_the_built_module_agree():
    """mypy's stubtest: every public name, signature, property and base in the stub matches
    the compiled module (Cython's own module-level helpers are allow-listed)."""
    run = subprocess.run([sys.executable, "-m", "mypy.stubtest", "kwire._codec",
                          "--allowlist", str(ALLOWLIST)],
                         capture_output=True, text=True, cwd=ROOT.parent)
    assert run.returncode == 0, run.stdout + run.stderr


def test_public_names_are_the_stubs():
    exported = {n for n in dir(compiled) if not n.startswith("_")}
    assert exported == _stub_public_names()


@pytest.mark.parametrize("name", sorted(_stub_functions()))
def test_function_parameters_and_defaults(name):
    """Names, kinds and defaults, for the compiled function and (public ones) its pure twin."""
    stub = _params(_stub_functions()[name])
    assert _runtime_params(getattr(compiled, name)) == stub
    if not name.startswith("_") or hasattr(pure, name):
        assert _runtime_params(getattr(pure, name)) == stub


def _init_params(cls_name: str) -> list[tuple[str, str, object]]:
    init = next(n for n in _stub_classes()[cls_name].body
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return _params(init)


def test_record_init_takes_the_stubs_keywords():
    """A cdef class's __init__ has no introspectable signature (so stubtest cannot check it):
    build one from the stub's parameter names and read every value back."""
    values = {"offset": 7, "timestamp": 1_700_000_000_000, "timestamp_type": 1, "key": b"k",
              "value": b"v", "headers": [("h", b"x")], "topic": "t", "partition": 3,
              "leader_epoch": 5}
    names = [p[0] for p in _init_params("Record")]
    assert names == list(values)
    for twin in (compiled, pure):
        r = twin.Record(**values)
        assert r.to_tuple() == tuple(values.values())
        assert [getattr(r, n) for n in names] == list(values.values())


def test_record_batch_init_takes_the_stubs_keywords():
    names = [p[0] for p in _init_params("RecordBatch")]
    for twin in (compiled, pure):
        rec = twin.Record(0, 1, 0, None, b"v")
        values = dict(zip(names, (10, 11, 2, "zstd", True, False, 99, 3, 4, 6, 0, 1, 2, [rec], 80)))
        b = twin.RecordBatch(**values)
        assert [getattr(b, n) for n in names] == list(values.values())
        assert b.to_tuple() == tuple(values.values())
