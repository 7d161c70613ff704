"""Packaging: the wheel pip builds for this interpreter, installed into a fresh venv, carries a
compiled codec that loads there and decodes record batches exactly as the in-tree codec does.

The wheel is built from a copy of the sources (the files the sdist takes: setup.py,
pyproject.toml, MANIFEST.in, README.md and kwire/ without built artifacts), with this
interpreter's Cython and setuptools (no build isolation: no downloads).  The venv gets the wheel
without dependencies; kwire's dependencies come from this environment through a .pth file
appended after the venv's own site-packages, so the installed kwire is the one imported.
tools/build_wheels.sh does the full job for every CPython (sdist, auditwheel, smoke tests).
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import kwire
from kwire import _pycodec

REPO = Path(__file__).resolve().parent.parent

# Run inside the venv, from a directory holding no kwire: where kwire came from, which codec
# it chose, and the decoded records of the batches in argv[1] (pickled to argv[2]).
_PROBE = textwrap.dedent("""
    import importlib.metadata, pickle, sys
    import kwire, kwire._codec, kwire._impl, kwire.confluent._message
    from kwire import records
    data = open(sys.argv[1], "rb").read()
    decoded = [r.to_tuple() for r in records.iter_records(data)]
    columns = records.decode_columns(data)
    out = {
        "kwire": kwire.__file__, "codec": kwire._codec.__file__,
        "message": kwire.confluent._message.__file__,
        "implementation": kwire._impl.IMPLEMENTATION, "record_type": records.Record.__module__,
        "records": decoded, "column_offsets": columns["offset"].tolist(),
        "version": kwire.__version__, "metadata_version": importlib.metadata.version("kwire"),
    }
    with open(sys.argv[2], "wb") as f:
        pickle.dump(out, f)
""")


def _batches() -> bytes:
    # several batches, every compression, headers, null keys and values, by the pure twin
    data, base = b"", 0
    for i, compression in enumerate(["none", "gzip", "snappy", "lz4", "zstd", "zstd", "lz4"]):
        recs = [(None if j % 5 == 0 else b"k%d-%d" % (i, j),
                 None if j % 7 == 3 else b"v" * (j % 50) + b"%d" % j,
                 [("h", b"%d" % j), ("n", None)] if j % 3 == 0 else [],
                 1_700_000_000_000 + j)
                for j in range(200 + 37 * i)]
        data += _pycodec.build_batch(recs, base, compression)
        base += len(recs)
    return data


def test_wheel_installs_and_its_compiled_codec_decodes_as_in_tree(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "kwire", src / "kwire",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.html", "*.pyc"))

    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-w", str(dist), str(src)],
        capture_output=True, text=True, cwd=tmp_path)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("kwire-*.whl")

    # a wheel for this interpreter, carrying both extensions and no generated C
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"kwire-{kwire.__version__}-{tag}-{tag}-"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    # typed (PEP 561): the marker and the compiled codec's stub travel with the code
    assert "kwire/py.typed" in names and "kwire/_codec.pyi" in names
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert f"kwire/_codec{suffix}" in names and f"kwire/confluent/_message{suffix}" in names
    assert not [n for n in names if n.endswith(".c")]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    # kwire's dependencies (cramjam, crc32c, ...) from this environment, after the venv's own
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (site / "zz_outer_site.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))

    batch, result, probe = tmp_path / "batches.bin", tmp_path / "out.pickle", tmp_path / "probe.py"
    data = _batches()
    batch.write_bytes(data)
    probe.write_text(_PROBE)
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KWIRE_PURE")}
    env["KWIRE_REQUIRE_EXTENSION"] = "1"
    ran = subprocess.run([str(python), "-I", str(probe), str(batch), str(result)],
                         capture_output=True, text=True, cwd=run_dir, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    got = pickle.loads(result.read_bytes())

    for key in ("kwire", "codec", "message"):
        assert Path(got[key]).resolve().is_relative_to(site.resolve()), (key, got[key])
    assert got["implementation"] == "cython" and got["record_type"] == "kwire._codec"

    want = [r.to_tuple() for r in _pycodec.iter_records(data)]
    assert len(want) == sum(200 + 37 * i for i in range(7))
    assert got["records"] == want
    assert got["column_offsets"] == [t[0] for t in want]

    # one version everywhere: the source's, the installed metadata's, and `kwire --version`'s
    assert got["version"] == got["metadata_version"] == kwire.__version__
    cli = subprocess.run([str(venv / "bin" / "kwire"), "--version"], capture_output=True, text=True,
                         cwd=run_dir, env=env, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == f"kwire {kwire.__version__}\n"
