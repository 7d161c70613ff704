"""Smoke test of an installed kwire wheel: the compiled codec loads, and a set of codec tests
passes against the installed package, not a source tree.

Run it with the interpreter of an environment the wheel (and TEST_REQUIREMENTS) went into:

    python tools/wheel_smoke.py [--tests DIR]

The tests directory (default: the one beside this file's parent, or ./tests as cibuildwheel's
test-sources leaves it) is copied into a temporary directory and pytest runs there, so neither
the current directory nor pytest's rootdir handling can put a checkout's `kwire/` on sys.path.
After the run it checks that every kwire module the tests imported came from site-packages.
Used by tools/build_wheels.sh and by cibuildwheel's test-command (pyproject.toml).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

# What the selected tests import besides kwire's own dependencies (kept in step with
# [tool.cibuildwheel] test-requires in pyproject.toml).
TEST_REQUIREMENTS = ["pytest>=8", "kafka-python>=2.1", "python-snappy>=0.7", "lz4>=4",
                     "zstandard>=0.22"]

# Codec tests that need no broker, on both twins: golden bytes from kafka-python for every
# compression, corrupt input, the decompression worker and its cramjam fallback, Arrow-style
# columns, the implementation choice (in subprocesses), and protocol frames.
SELECTION = {
    "test_records.py": ("v2_golden or legacy_golden or crc_failure or twins_build or columns_layout or "
                        "worker_off_and_cramjam or worker_corrupt or public_module or "
                        "missing_extension or huge_records_count"),
    "test_protocol_roundtrip.py": ("unknown_tagged or read_only_views or frames_with_headers or "
                                   "negative_lengths or forged_array"),
}


def _installed_roots() -> list[str]:
    return sorted({os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parent
    default = here.parent / "tests"
    if not default.is_dir():
        default = Path.cwd() / "tests"
    parser.add_argument("--tests", type=Path, default=default, help="kwire's tests directory")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args(argv)

    os.environ["KWIRE_REQUIRE_EXTENSION"] = "1"       # a missing extension fails, loudly
    os.environ.pop("KWIRE_PURE", None)
    os.environ.pop("PYTHONPATH", None)                 # for the tests' own subprocesses
    work = Path(tempfile.mkdtemp(prefix="kwire-wheel-smoke-"))
    try:
        shutil.copytree(args.tests, work / "tests",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        os.chdir(work)
        roots = _installed_roots()      # drop any other directory holding a kwire package
        sys.path[:] = [p for p in sys.path if p not in ("", ".") and
                       (os.path.realpath(p) in roots or not (Path(p) / "kwire").is_dir())]

        import kwire._codec
        import kwire._impl
        assert kwire._impl.IMPLEMENTATION == "cython", kwire._impl.IMPLEMENTATION
        print(f"kwire {kwire.__file__}\ncodec {kwire._codec.__file__} "
              f"(native decompression: {kwire._codec.NATIVE_DECOMPRESSION})", flush=True)

        import pytest
        files = [f"tests/{name}" for name in SELECTION]
        selection = " or ".join(f"({s})" for s in SELECTION.values())
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-k", selection, *files,
                            *args.pytest_args])

        strays = sorted(f"{name}: {mod.__file__}" for name, mod in list(sys.modules.items())
                        if (name == "kwire" or name.startswith("kwire."))
                        and getattr(mod, "__file__", None)
                        and not any(os.path.realpath(mod.__file__).startswith(r + os.sep)
                                    for r in roots))
        if strays:
            print("kwire modules imported from outside the installed package:\n  "
                  + "\n  ".join(strays), file=sys.stderr)
            return 1
        if code != 0:
            return int(code)
        print("wheel smoke test passed", flush=True)
        return 0
    finally:
        os.chdir("/")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
