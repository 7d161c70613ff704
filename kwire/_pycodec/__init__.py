"""The pure-Python codec: the reference twin of kwire._codec, with the same API."""
IMPLEMENTATION = "python"

from .messages import decode_message, decode_struct, encode_message, encode_struct  # noqa: E402

try:  # the record layer's twin
    from .records import *  # noqa: F401,F403,E402
except ImportError:  # pragma: no cover - only while the record layer is being written
    pass
