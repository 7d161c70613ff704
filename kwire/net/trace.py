"""What the network client tells about each frame: the tracer callback, the ``kwire.protocol``
debug log (``debug=protocol``) and the statistics.  No I/O of its own.

Credentials never leave here: the SASL ``auth_bytes`` (and any password field) become
"<redacted>" before a tracer or the log sees a body.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import KwireError
from ..protocol import api as _api
from .connection import Connection, InFlight

__all__ = ["trace", "PROTOCOL_LOG_BODY_CHARS", "SECRET_KEYS"]

protocol_log = logging.getLogger("kwire.protocol")
_log = logging.getLogger("kwire.net")

SECRET_KEYS = frozenset({"auth_bytes", "password", "sasl_password"})  # never traced nor logged
PROTOCOL_LOG_BODY_CHARS = 200


def trace(direction: str, conn: Connection, f: InFlight, body: dict[str, Any], size: int | None, *,
          tracer: Callable[[dict[str, Any]], Any] | None, stats: Any, client_id: str) -> None:
    """One frame ``direction`` ("send" / "recv") of request ``f`` on ``conn``: counted in
    ``stats`` (a kwire.stats.NetStats, or None), given to ``tracer``, logged at DEBUG."""
    if stats is not None:
        stats.on_io(direction, conn, f.api, size, f.rtt_us if direction == "recv" else None)
    logging_on = protocol_log.isEnabledFor(logging.DEBUG)
    if tracer is None and not logging_on:
        return
    rtt_us = f.rtt_us if direction == "recv" else None
    event = {
        "direction": direction, "node_id": conn.node_id, "address": conn.address,
        "local_address": local_address(conn), "client_id": client_id,
        "api": f.api, "api_key": f.api_key, "version": f.version,
        "correlation_id": f.correlation_id,
        "size_bytes": size if size is not None else f.size_bytes,
        "rtt_ms": f.rtt_ms if direction == "recv" else None,
        "rtt_us": rtt_us,
        "body": redact(body),
    }
    if tracer is not None:
        try:
            tracer(event)
        except Exception:
            _log.exception("tracer raised")
    if logging_on:
        rtt = f" rtt={rtt_us / 1000:.3f}ms" if rtt_us is not None else ""
        protocol_log.debug("%s node=%s %s->%s %s v%s corr=%s size=%s%s body=%s", direction, conn.node_id,
                           event["local_address"], conn.address, f.api, f.version, f.correlation_id,
                           event["size_bytes"], rtt, one_line(summarize(redact(as_sent(f, direction, body)))))


def summarize(value: Any, limit: int = 64) -> Any:
    """A body fit for a log line: long bytes become "<N bytes>", secrets are masked."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if k in SECRET_KEYS else summarize(v, limit)) for k, v in value.items()}
    if isinstance(value, list):
        return [summarize(v, limit) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        n = len(value)
        return bytes(value).hex() if n <= limit // 2 else f"<{n} bytes>"
    return value


def local_address(conn: Connection) -> str | None:
    """``host:port`` of the connection's own end, or None when it has no socket."""
    sock = conn.sock
    if sock is None:
        return None
    try:
        host, port = sock.getsockname()[:2]
    except OSError:
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def as_sent(f: InFlight, direction: str, body: Any) -> Any:
    """A request body as its bytes carry it (encoded at the request's version and decoded
    back: no field that version lacks), for ``debug=protocol``; answers are decoded already."""
    if direction != "send" or not isinstance(body, dict) or f.version is None:
        return body
    try:
        return _api.decode_request_body(f.api, f.version, _api.encode_request_body(f.api, f.version, body))
    except (KwireError, KeyError, TypeError, ValueError):
        return body


def one_line(body: Any, limit: int = PROTOCOL_LOG_BODY_CHARS) -> str:
    """The start of a body's repr for ``debug=protocol``: one line per frame, whatever the
    body's size (``--trace`` shows whole bodies)."""
    text = repr(body)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... (+{len(text) - limit} chars; --trace shows all)"


def redact(body: Any) -> Any:
    if isinstance(body, dict) and SECRET_KEYS.intersection(body):
        return {k: ("<redacted>" if k in SECRET_KEYS else v) for k, v in body.items()}
    return body
