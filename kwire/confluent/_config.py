"""confluent-kafka configuration dicts -> kwire configuration.

kwire's own table (:mod:`kwire.config`) already takes librdkafka's names for what it implements.
This module handles the rest of what confluent-kafka programs commonly pass:

* keys the adapter implements itself (callbacks, statistics, ``log_level``);
* keys that only tune librdkafka's internals, which kwire has no counterpart for: accepted and
  ignored (:data:`NO_OPS`, each with the reason);
* ``group.protocol``: ``classic`` (the default) or ``consumer`` (KIP-848), as kwire's own.

Anything else unknown is refused as confluent-kafka refuses it: KafkaException(_INVALID_ARG).
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from ..config import _BY_NAME
from ..errors import ConfigError
from ._types import KafkaError, KafkaException

# Accepted and ignored: they tune librdkafka's internals, which kwire does not have.
NO_OPS: dict[str, str] = {
    "queued.min.messages": "librdkafka's per-partition prefetch queue; kwire bounds prefetch by "
                           "queued.max.messages.kbytes",
    "fetch.queue.backoff.ms": "librdkafka's back-off when its prefetch queue is full; kwire "
                              "fetches again as soon as the application frees buffer space",
    "fetch.error.backoff.ms": "kwire backs off failed fetches by retry.backoff.ms",
    "socket.keepalive.enable": "kwire's sockets use the OS defaults",
    "socket.nagle.disable": "kwire always sets TCP_NODELAY",
    "socket.send.buffer.bytes": "kwire's sockets use the OS defaults",
    "socket.receive.buffer.bytes": "kwire's sockets use the OS defaults",
    "broker.address.family": "kwire connects to whatever address the name resolves to",
    "enable.metrics.push": "KIP-714 client metrics are not sent",
    "api.version.request": "kwire always negotiates API versions (ApiVersions)",
    "api.version.request.timeout.ms": "ApiVersions is bounded by socket.connection.setup.timeout.ms",
    "api.version.fallback.ms": "kwire always negotiates API versions",
    "broker.version.fallback": "kwire always negotiates API versions",
    "log.connection.close": "connection closes are logged at DEBUG on the kwire loggers",
    "log.queue": "callbacks run in the application thread already",
    "log.thread.name": "kwire's log records carry the thread name",
    "enable.sparse.connections": "kwire connects to a broker only when it needs one",
    "topic.metadata.refresh.sparse": "kwire refreshes only the topics it uses",
    "topic.metadata.refresh.interval.ms": "kwire refreshes by metadata.max.age.ms and on errors",
    "topic.metadata.refresh.fast.interval.ms": "kwire refreshes by retry.backoff.ms on errors",
    "topic.metadata.propagation.max.ms": "kwire waits up to 30 s for a new topic's metadata",
    "coordinator.query.interval.ms": "kwire looks the coordinator up again when it moves",
    "client.dns.lookup": "kwire resolves each name when it connects",
    "connections.max.idle.ms": "idle connections stay open",
    "max.in.flight.requests.per.connection": "kwire sends one batch per partition at a time",
    "max.in.flight": "kwire sends one batch per partition at a time",
    "queue.buffering.max.kbytes": "kwire bounds the producer by queue.buffering.max.messages",
    "queue.buffering.backpressure.threshold": "librdkafka internals",
    "sticky.partitioning.linger.ms": "kwire switches null-key partitions when a batch is sent",
    "compression.level": "kwire uses each codec's default level",
    "message.copy.max.bytes": "librdkafka internals",
    "retry.backoff.max.ms": "kwire backs off by retry.backoff.ms",
    "builtin.features": "informational in librdkafka",
    "internal.termination.signal": "librdkafka internals",
    "plugin.library.paths": "librdkafka plugins do not apply",
    "open_cb": "librdkafka internals",
    "socket_cb": "librdkafka internals",
    "connect_cb": "librdkafka internals",
    "closesocket_cb": "librdkafka internals",
    "background_event_cb": "librdkafka internals",
    "check.crcs.interval": "librdkafka internals",
    "max.poll.records": "poll() returns one message and consume(n) up to n, whatever it says",
    "throttle_cb": "broker throttling is honoured by kwire but not reported",
    "offset.store.method": "offsets are always stored in the broker",
}

_ALIASES = {"auto.commit.enable": "enable.auto.commit"}  # librdkafka's topic-level alias

# Implemented by the adapter (the Consumer/Producer classes read them from ``extra``).
ADAPTER_KEYS = ("error_cb", "on_commit", "on_delivery", "dr_cb", "dr_msg_cb", "stats_cb",
                "statistics.interval.ms", "log_level", "logger")


NO_BROKERS = "127.0.0.1:0"


def _invalid(text: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError._INVALID_ARG, text))


def split_config(conf: Any, kwargs: dict[str, Any],
                 role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(kwire configuration, adapter keys) from a confluent-kafka ``conf`` dict and keyword
    arguments (confluent-kafka accepts ``Consumer(conf, logger=...)``)."""
    if conf is None and not kwargs:
        raise TypeError("expected configuration dict")
    if conf is not None and not isinstance(conf, dict):
        raise TypeError("expected configuration dict")
    merged: dict[str, Any] = dict(conf or {})
    merged.update(kwargs)
    dtc = merged.pop("default.topic.config", None)  # librdkafka's old nested topic config:
    if dtc:                                          # its values win, as in confluent-kafka
        merged.update(dict(dtc))
    kconf: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for old, new in _ALIASES.items():  # librdkafka's older names kwire's table does not have
        if old in merged:
            merged.setdefault(new, merged.pop(old))
    for k, v in merged.items():
        if not isinstance(k, str):
            raise TypeError("expected configuration property name as type str")
        if k in ADAPTER_KEYS:
            extra[k] = v
        elif k in NO_OPS:
            continue
        elif k in _BY_NAME:
            kconf[k] = v
        else:
            raise _invalid(f'No such configuration property: "{k}"')
    for name in ("error_cb", "on_commit", "on_delivery", "dr_cb", "dr_msg_cb", "stats_cb"):
        if extra.get(name) is not None and not callable(extra[name]):
            raise TypeError(f"expected {name} property as a callable function")
    if "statistics.interval.ms" in extra:
        try:
            ms = int(extra["statistics.interval.ms"])
        except (TypeError, ValueError):
            raise _invalid('Invalid value for configuration property "statistics.interval.ms"') from None
        if not 0 <= ms <= 86_400_000:
            raise _invalid('Invalid value for configuration property "statistics.interval.ms"')
        extra["statistics.interval.ms"] = ms
    for k in ("logger", "stats_cb", "statistics.interval.ms"):  # kwire's own, checked here
        if k in extra:                                          # the confluent way
            kconf[k] = extra[k]
    for k in ("bootstrap.servers", "metadata.broker.list"):
        if k in kconf and kconf[k] is None:  # None means unset, as in confluent-kafka
            del kconf[k]
    if "bootstrap.servers" not in kconf and "metadata.broker.list" not in kconf:
        # librdkafka starts without brokers (requests time out, messages expire); kwire's
        # network client needs an address: one no connection can reach (port 0) stands in,
        # and "all brokers down" is not reported for it.
        kconf["bootstrap.servers"] = NO_BROKERS
        extra["_no_brokers"] = True
        if kconf.get("stats_cb") is not None:
            kconf["stats_cb"] = _without_placeholder(kconf["stats_cb"])
    return kconf, extra


def _without_placeholder(stats_cb: Callable[[str], object]) -> Callable[[str], None]:
    """stats_cb for a client without brokers: librdkafka lists none, so the placeholder
    address is left out of ``brokers``."""
    def cb(doc: str) -> None:
        d = json.loads(doc)
        d["brokers"] = {k: v for k, v in d.get("brokers", {}).items()
                        if v.get("nodename") != NO_BROKERS}
        stats_cb(json.dumps(d))
    return cb


def config_error(exc: ConfigError) -> KafkaException:
    """librdkafka's wording for kwire's ConfigError (programs match on it)."""
    text = str(exc)
    m = re.match(r"invalid value (.*) for configuration property '([^']*)': (.*)$", text)
    if m:
        value, name, why = m.groups()
        if value[:1] in "'\"" and value[-1:] == value[:1]:
            value = value[1:-1]
        text = f'Invalid value for configuration property "{name}": {value} ({why})'
    m = re.match(r"unknown configuration property '([^']*)'$", text)
    if m:
        text = f'No such configuration property: "{m.group(1)}"'
    return _invalid(text)


_LOG_LEVELS = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR,
               4: logging.WARNING, 5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}


class _Forward(logging.Handler):
    def __init__(self, target: logging.Logger, level: int) -> None:
        super().__init__(level)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self.target.isEnabledFor(record.levelno):
            self.target.handle(record)


def forward_logs(logger: logging.Logger, log_level: int | str | None) -> logging.Handler:
    """``logger``: kwire's log records (the 'kwire' logger tree) go to it, filtered by
    ``log_level`` (syslog numbering as librdkafka's, default 6 = info) while the client is open."""
    level = _LOG_LEVELS.get(int(log_level) if log_level is not None else 6, logging.INFO)
    h = _Forward(logger, level)
    root = logging.getLogger("kwire")
    root.addHandler(h)
    if root.getEffectiveLevel() > level:
        root.setLevel(level)
    return h
