"""CRC-32C (Castagnoli) for record batches: the ``crc32c`` package's compiled function.

Loaded without running the package's ``__init__``: crc32c 2.x asks ``importlib.metadata`` for
its own version when imported, which walks every ``sys.path`` entry -- and in a Spark Python
worker those include PySpark's zip files, whose whole directories it reads.  Measured in a
cold worker (PySpark 4.2, local mode): 47 ms of kwire's 105 ms import, in every worker of
every job.  The extension module (``crc32c._crc32c``) needs nothing from its package; the
package's own ``crc32c.crc32c`` is that module's function.  Anything unexpected (another
layout of the package, a frozen install) falls back to a plain ``import crc32c``.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]


def _core_module() -> Any:
    """``crc32c._crc32c`` loaded from the installed package's directory, or None."""
    spec = importlib.util.find_spec("crc32c")  # finds the package; runs none of it
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_crc32c" + suffix)
            if os.path.isfile(path):
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                core_spec = importlib.util.spec_from_file_location("crc32c._crc32c", path, loader=loader)
                if core_spec is None:
                    return None
                module = importlib.util.module_from_spec(core_spec)
                loader.exec_module(module)
                return module
    return None


_CHECK = (b"123456789", 0xE3069283)  # CRC-32C's check value


def _load() -> Callable[..., int]:
    if "crc32c" not in sys.modules and "crc32c._crc32c" not in sys.modules:  # (else: nothing to save)
        try:
            core = _core_module()
            func = getattr(core, "crc32c", None)
            if callable(func) and func(_CHECK[0]) == _CHECK[1]:
                # registered, so a later "import crc32c" (the debugger's, the user's) finds
                # it instead of initialising the extension a second time
                sys.modules.setdefault("crc32c._crc32c", core)
                return func  # type: ignore[no-any-return]
        except Exception:  # noqa: BLE001 - anything odd: the package's own import below
            pass
    import crc32c as package

    return package.crc32c


crc32c: Callable[..., int] = _load()
