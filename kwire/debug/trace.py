"""Live protocol traces: every frame a :class:`~kwire.net.client.NetworkClient` sends or receives.

::

    from kwire.debug.trace import make_tracer
    client = NetworkClient(config, tracer=make_tracer())              # text on stderr
    client = NetworkClient(config, tracer=make_tracer("json", stream=open("trace.jsonl", "w")))

    # or through logging: rendered frames go to the "kwire.protocol.trace" logger at DEBUG
    client = NetworkClient(config, tracer=make_tracer(logger="kwire.protocol.trace"))
    enable_protocol_log()   # a stderr handler on that logger, level DEBUG

The network client calls the tracer with a dict per frame: ``direction`` ("send"/"recv"),
``node_id``, ``address``, ``api`` (name), ``api_key``, ``version``, ``correlation_id``,
``size_bytes``, ``rtt_ms`` and ``rtt_us`` (responses), ``client_id``, ``local_address`` and
``body``.  :func:`normalize_event` turns it into the event shape render.py shares with decoded
captures -- client and broker addresses, client id, rtt to the microsecond -- the body
re-encoded at the frame's version and decoded back (:func:`wire_body`), so the trace shows what
the bytes carry: no field the version lacks, no tagged field the encoder left out.  (The network client also writes a one-line
summary of each frame to the ``kwire.protocol`` logger at DEBUG by itself; the rendered frames
go to its child ``kwire.protocol.trace`` so the two can be routed apart.)
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from ..errors import KwireError
from ..protocol import api as P
from .partial import decode_as_sent
from .render import Renderer, to_json_event

__all__ = ["TRACE_LOGGER", "enable_protocol_log", "make_tracer", "normalize_event"]

TRACE_LOGGER = "kwire.protocol.trace"
_SEND = frozenset({"send", "sent", "request", "out", "tx", "->"})


def _address(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) >= 2:
        host, port = value[0], value[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(value)


def wire_body(kind: str, api: str | int | None, version: int | None, body: Any) -> Any:
    """The body as it crosses the wire: encoded at the frame's version and decoded back, so a
    field the version does not have, or a tagged field left at its default (which encoders do
    not send), is not shown.  The body as given when it cannot be encoded (that is the
    client's error to report, not the tracer's)."""
    if not isinstance(body, dict) or api is None or version is None:
        return body
    try:
        a = P.api(api)
        if kind == "request":
            plan, data = P.request_plan(a, version), P.encode_request_body(a, version, body)
        else:
            plan, data = P.response_plan(a, version), P.encode_response_body(a, version, body)
        return decode_as_sent(plan, data)
    except (KwireError, KeyError, TypeError, ValueError):
        return body


def normalize_event(event: dict[str, Any], *, as_sent: bool = True) -> dict[str, Any]:
    """A NetworkClient trace event in render.py's event shape; ``as_sent``: the body as the
    bytes carry it (:func:`wire_body`), not the dict the client gave the encoder."""
    to_broker = str(event.get("direction", "")).lower() in _SEND
    api, key = event.get("api"), event.get("api_key")
    if isinstance(api, P.Api):
        key = api.key
        api = api.name
    elif isinstance(api, int):
        key = api
        found = P.APIS.get(api)
        api = found.name if found else f"api {api}"
    elif key is None and api is not None:
        try:
            key = P.api(api).key
        except KwireError:
            key = None
    ts = event.get("ts")
    if ts is None:
        ts = event.get("time")
    if not isinstance(ts, (int, float)):
        ts = time.time()
    kind = "request" if to_broker else "response"
    body = event.get("body")
    if as_sent and body is not None:
        body = wire_body(kind, key if key is not None else api, event.get("version"), body)
    rtt_us = event.get("rtt_us")
    client = _address(event.get("local_address"))
    broker = _address(event.get("address"))
    return {
        "kind": kind, "ts": ts, "client": client,
        "broker": broker, "node_id": event.get("node_id"), "to_broker": to_broker,
        "connection": None,
        "api": api, "api_key": key, "version": event.get("version"),
        "correlation_id": event.get("correlation_id"),
        "client_id": event.get("client_id"), "size_bytes": event.get("size_bytes"),
        # microseconds where the client measured them, as a capture's timestamps give
        "rtt_ms": rtt_us / 1000 if rtt_us is not None else event.get("rtt_ms"), "body": body,
        "reason": None, "data": None, "offset": None,
    }


def make_tracer(format: str = "text", stream: TextIO | None = None, records: str = "summary", *,
                logger: str | logging.Logger | None = None, level: int = logging.DEBUG,
                color: bool | None = None) -> Callable[[dict[str, Any]], None]:
    """A callable for ``NetworkClient(tracer=...)`` that renders every frame.

    ``format`` "text" (for people) or "json" (one object per line); ``records`` "summary" or
    "full" for record payloads.  Frames go to ``stream`` (default ``sys.stderr``, looked up at
    each call so test harnesses that swap it see them), or, when ``logger`` is given (a name or
    a Logger), to that logger at ``level`` -- rendered only when the logger is enabled for it --
    with the JSON form of the event in the record's ``kwire_event`` attribute.
    """
    lock = threading.Lock()  # one frame's lines stay together when several clients share a stream
    if logger is not None:
        log = logging.getLogger(logger) if isinstance(logger, str) else logger
        renderer = Renderer(format, records, stream=sys.stderr, color=False)

        def log_tracer(event: dict[str, Any]) -> None:
            if not log.isEnabledFor(level):
                return
            ev = normalize_event(event)
            with lock:
                text = renderer.render(ev)
            log.log(level, "%s", text, extra={"kwire_event": to_json_event(ev, records)})

        return log_tracer

    renderers: dict[int, Renderer] = {}

    def tracer(event: dict[str, Any]) -> None:
        out = stream if stream is not None else sys.stderr
        ev = normalize_event(event)
        with lock:
            r = renderers.get(id(out))
            if r is None or r.stream is not out:
                r = renderers[id(out)] = Renderer(format, records, stream=out, color=color)
            r.write(ev)
            r.flush()

    return tracer


def enable_protocol_log(stream: TextIO | None = None, *, level: int = logging.DEBUG,
                        name: str = TRACE_LOGGER) -> logging.Handler:
    """Attach a plain ``%(message)s`` stream handler (default stderr) to the trace logger and
    enable it at ``level``; returns the handler (remove it with ``logger.removeHandler``)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(name)
    log.addHandler(handler)
    log.setLevel(level)
    return handler
