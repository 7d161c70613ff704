"""kwire._crc: the crc32c package's compiled CRC-32C, loaded without the package's __init__
(whose importlib.metadata version look-up reads every zip on sys.path -- PySpark's, in a Spark
worker)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import crc32c as crc32c_package
import pytest

from kwire import _crc

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("data", [b"", b"123456789", bytes(range(256)) * 41, b"\x00" * 4097])
def test_it_is_crc32c_of_the_package(data):
    assert _crc.crc32c(data) == crc32c_package.crc32c(data)
    assert _crc.crc32c(memoryview(data)) == crc32c_package.crc32c(data)
    half = len(data) // 2
    assert _crc.crc32c(data[half:], _crc.crc32c(data[:half])) == crc32c_package.crc32c(data)
    assert _crc.crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C


def test_the_codecs_import_no_crc32c_package_and_no_metadata_lookup():
    """A fresh process importing kwire's codecs (with a zip on sys.path, as a Spark worker has)
    runs neither the crc32c package's __init__ nor importlib.metadata, and checks a batch CRC."""
    probe = (
        "import sys, zipfile, os, tempfile\n"
        "z = os.path.join(tempfile.mkdtemp(), 'big.zip')\n"
        "with zipfile.ZipFile(z, 'w') as f:\n"
        "    [f.writestr(f'pkg/m{i}.py', '') for i in range(2000)]\n"
        "sys.path.insert(0, z)\n"
        "import kwire._codec, kwire._pycodec.records\n"
        "from kwire import _crc\n"
        "assert 'crc32c' not in sys.modules, 'the crc32c package ran'\n"
        "assert 'importlib.metadata' not in sys.modules, 'importlib.metadata was imported'\n"
        "assert _crc.crc32c(b'123456789') == 0xE3069283\n"
        "import crc32c\n"  # later, the package itself: the same extension, not a second one
        "assert crc32c.crc32c is _crc.crc32c and crc32c.crc32c(b'123456789') == 0xE3069283\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_falls_back_to_the_package(monkeypatch):
    monkeypatch.setattr(_crc, "_core_module", lambda: None)
    monkeypatch.delitem(sys.modules, "crc32c", raising=False)
    assert _crc._load() is crc32c_package.crc32c

    def broken():
        raise ImportError("no such extension")
    monkeypatch.setattr(_crc, "_core_module", broken)
    assert _crc._load()(b"123456789") == 0xE3069283

    class Odd:  # a future layout whose function is not CRC-32C
        @staticmethod
        def crc32c(data, value=0):
            return 0
    monkeypatch.setattr(_crc, "_core_module", lambda: Odd)
    monkeypatch.delitem(sys.modules, "crc32c._crc32c", raising=False)
    assert _crc._load()(b"123456789") == 0xE3069283

