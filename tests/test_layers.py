"""Layers only point down (ARCHITECTURE.md; issue 16):

    errors, _plan  ->  codec (_codec, _pycodec; config beside it)  ->  _impl  ->  protocol, records
      ->  net  ->  admin, producer, consumer  ->  confluent, debug, embedded, spark
      ->  commands, demo  ->  cli  ->  __main__

Every module and package of kwire/ (the Cython sources too) has a place in LAYERS, so a new
one must be placed before this test passes.  A module may import its own unit, and units of
lower layers; units of one layer do not import each other (admin, producer and consumer are
independent; so are confluent, debug, embedded and spark).  Imports inside functions count
too: a lazy import is still a dependency."""
import ast
import re
from pathlib import Path

import kwire

ROOT = Path(kwire.__file__).parent

# Lowest first.  A unit is a top-level module or package under kwire/ ("" is kwire/__init__).
LAYERS: list[set[str]] = [
    {"", "errors", "_plan", "_crc"},            # imports nothing from kwire (_crc: crc32c's function)
    {"_codec", "_pycodec", "config"},           # the codec twins; configuration (errors only)
    {"_impl"},                                  # picks a codec twin
    {"protocol", "records"},                    # messages and frames; the record layer
    {"net", "stats"},                           # connections, the network client, metadata;
                                                # librdkafka's statistics document (no imports)
    {"producer", "consumer"},                   # the clients
    {"admin"},                                  # cluster and group administration (consumer types)
    {"confluent", "debug", "embedded", "spark"},  # built on the clients / the protocol
    {"commands", "demo"},                       # the cluster subcommands, the demo job
    {"cli"},                                    # the kwire command
    {"__main__"},
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}

# kwire/_codec.pyx's import lines (Cython is not Python: read them as text)
_PYX_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+c?import|import\s+([\w.]+))", re.M)


def _unit(path: Path) -> str:
    rel = path.relative_to(ROOT)
    if len(rel.parts) > 1:
        return rel.parts[0]
    if rel.suffix == ".pxi":
        return "_codec"  # included by kwire/_codec.pyx
    name = rel.name.split(".")[0]
    return "" if name == "__init__" else name


def _package(path: Path) -> list[str]:
    return ["kwire", *path.relative_to(ROOT).parts[:-1]]


def _resolve(package: list[str], level: int, module: str | None) -> str:
    base = package[:len(package) - level + 1] if level else []
    return ".".join(base + ([module] if module else []))


def _imports(path: Path) -> list[str]:
    """Every module path imported (kwire.x.y), top-level or inside functions."""
    package = _package(path)
    if path.suffix in (".pyx", ".pxi"):
        out = []
        for m in _PYX_IMPORT.finditer(path.read_text()):
            target = m.group(1) or m.group(2)
            level = len(target) - len(target.lstrip("."))
            out.append(_resolve(package, level, target.lstrip(".") or None) if level else target)
        return out
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(package, node.level, node.module) if node.level else node.module or ""
            if node.module is None or mod == "kwire":
                # `from . import x` / `from kwire import x`: x may be a module or a name
                out += [f"{mod}.{a.name}" for a in node.names]
            else:
                out.append(mod)
    return out


def _target_unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "kwire":
        return None
    if len(parts) == 1:
        return ""
    unit = parts[1]
    # `from kwire import __version__` (or another name of kwire/__init__) is the root package
    return unit if unit in RANK else ""


def _sources() -> list[Path]:
    return sorted(p for pattern in ("*.py", "*.pyx", "*.pxi") for p in ROOT.rglob(pattern)
                  if "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    missing = sorted({str(p.relative_to(ROOT)) for p in _sources() if _unit(p) not in RANK})
    assert not missing, f"place these in LAYERS: {missing}"


def test_layers_only_point_down():
    problems = []
    for path in _sources():
        unit = _unit(path)
        for module in _imports(path):
            target = _target_unit(module)
            if target is None or target == unit:
                continue
            if RANK[target] > RANK[unit]:
                problems.append(f"{path.relative_to(ROOT)} ({unit or 'kwire'}) imports {module}: "
                                f"up from layer {RANK[unit]} to {RANK[target]}")
            elif RANK[target] == RANK[unit]:
                problems.append(f"{path.relative_to(ROOT)} ({unit or 'kwire'}) imports {module}: "
                                f"a sibling in layer {RANK[unit]}")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_upward_and_lazy_imports(tmp_path):
    """The checker itself: a relative, a lazy (in-function) and an absolute upward import are
    all found, and a package's `from . import x` resolves to x's unit."""
    pkg = tmp_path / "kwire" / "net"
    pkg.mkdir(parents=True)
    src = pkg / "client.py"
    src.write_text("from ..consumer import Consumer\n"
                   "def f():\n    import kwire.spark.reader\n"
                   "from kwire import cli\nfrom .. import __version__\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path / "kwire"
    try:
        units = [_target_unit(m) for m in _imports(src)]
    finally:
        ROOT = saved
    assert sorted(units) == ["", "cli", "consumer", "spark"]
    assert [u for u in units if RANK[u] > RANK["net"]] and RANK[""] < RANK["net"]
