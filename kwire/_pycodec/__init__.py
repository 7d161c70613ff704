"""The pure-Python codec: the reference twin of kwire._codec, with the same API."""
IMPLEMENTATION = "python"

from .messages import decode_message, decode_struct, encode_message, encode_struct  # noqa: E402,F401
from .records import *  # noqa: F401,F403,E402  (the record layer's twin)
