"""Layers only point down: _codec -> protocol -> net -> consumer -> confluent (the
confluent-kafka adapter) -> spark / cli."""
import ast
from pathlib import Path

import kwire

ROOT = Path(kwire.__file__).parent
ORDER = ["_codec", "_pycodec", "protocol", "net", "consumer", "confluent", "spark", "cli"]
# Modules every layer may use: the error classes, the codec selector, the record layer.
SHARED = {"errors", "_impl", "_plan", "records", "_pycodec", "_codec"}


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "kwire" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path, package: str):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    for alias in node.names:
                        yield mod + "." + alias.name
                    continue
                yield mod
            elif node.module:
                yield node.module


def test_lower_layers_import_nothing_above_them():
    problems = []
    for layer in ("protocol", "_pycodec", "net", "consumer", "confluent"):
        rank = ORDER.index(layer)
        base = ROOT / layer
        for path in sorted(base.rglob("*.py")) if base.is_dir() else []:
            rel = path.relative_to(ROOT.parent).with_suffix("")
            package = ".".join(rel.parts[:-1]) if path.name != "__init__.py" else ".".join(rel.parts[:-1])
            for mod in _imports(path, package):
                target = _layer_of(mod)
                if target is None or target in SHARED or target == layer:
                    continue
                if target in ORDER and ORDER.index(target) > rank:
                    problems.append(f"{rel}: imports {mod}")
    assert not problems, "\n".join(problems)
