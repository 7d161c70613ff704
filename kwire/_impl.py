"""Choose the codec implementation once, at import.

The compiled extension (kwire._codec) is the default.  ``KWIRE_PURE=1`` selects the
pure-Python twin (kwire._pycodec).  ``KWIRE_REQUIRE_EXTENSION=1`` (set by CI) turns a
failed extension import into an error instead of a silent fallback.
"""
from __future__ import annotations

import os
from types import ModuleType

_pure = os.environ.get("KWIRE_PURE", "") not in ("", "0")
_required = os.environ.get("KWIRE_REQUIRE_EXTENSION", "") not in ("", "0")


def _load() -> ModuleType:
    if _pure:
        from . import _pycodec
        return _pycodec
    try:
        from . import _codec
        return _codec
    except ImportError as exc:
        if _required:
            raise ImportError(f"kwire._codec (the compiled codec) failed to import: {exc}") from exc
        import warnings
        warnings.warn(f"kwire: compiled codec unavailable ({exc}); using the pure-Python twin",
                      RuntimeWarning, stacklevel=2)
        from . import _pycodec
        return _pycodec


_codec_module = _load()
IMPLEMENTATION: str = _codec_module.IMPLEMENTATION


def codec_module() -> ModuleType:
    """The codec module in use: kwire._codec or kwire._pycodec (same API)."""
    return _codec_module
