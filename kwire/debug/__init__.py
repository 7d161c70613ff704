"""Protocol debugging: see every frame kwire (or any Kafka client) puts on the wire.

* :mod:`kwire.debug.capture` reads .pcap/.pcapng captures (through ``dpkt``, the ``debug``
  extra), reassembles each TCP stream, splits it into Kafka frames, pairs every response with
  its request and decodes both with :mod:`kwire.protocol`.
* :mod:`kwire.debug.render` turns a decoded frame, or a live trace event, into text for people
  or one JSON object per line for scripts.
* :mod:`kwire.debug.trace` makes the callable that :class:`kwire.net.client.NetworkClient`
  takes as ``tracer=``, and a logging integration.

This package sits beside :mod:`kwire.cli`: it may import protocol, records and net, and
nothing below it imports it.
"""
from __future__ import annotations

from typing import Any

from .trace import make_tracer

__all__ = ["decode_capture", "make_tracer"]


def decode_capture(*args: Any, **kwargs: Any) -> Any:
    """See :func:`kwire.debug.capture.decode_capture` (imported on first use: it needs dpkt)."""
    from .capture import decode_capture as _decode_capture

    return _decode_capture(*args, **kwargs)
