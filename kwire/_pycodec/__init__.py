"""The pure-Python codec: the reference twin of kwire._codec, with the same API."""
IMPLEMENTATION = "python"

from .messages import decode_message, decode_struct, encode_message, encode_struct  # noqa: E402,F401
from .records import *  # noqa: F401,F403,E402  (the record layer's twin)


def receive_buffer(size: int) -> bytearray:
    """A ``bytearray`` of ``size`` bytes for a socket to fill (the compiled twin leaves it
    uninitialised; here it is zeroed)."""
    if size < 0:
        raise ValueError(f"receive_buffer: size {size} is negative")
    return bytearray(size)
