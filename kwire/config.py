"""Every configuration property kwire understands, in one table, and the parser that checks them.

Names follow librdkafka / the Java client, so a confluent-kafka configuration dict works as it
is.  Defaults follow librdkafka where the two differ (kwire's users usually come from
confluent-kafka); the ``doc`` of such a property says so.

    cfg = parse_config({"bootstrap.servers": "localhost:9092", "group.id": "g"}, role="consumer")
    cfg.session_timeout_ms          # 45000 -- dots become underscores
    cfg["session.timeout.ms"]       # the same value

:func:`parse_config` raises :class:`~kwire.errors.ConfigError` naming the key for an unknown key
or a bad value (wrong type, out of range, not one of the choices).  Booleans accept
``true/false/1/0/yes/no/on/off`` strings, numbers accept decimal strings, lists accept
comma-separated strings.  ``python -m kwire.config > docs/CONFIG.md`` renders the table.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

__all__ = ["Prop", "PROPERTIES", "Config", "parse_config", "render_markdown"]

CLIENT = "client"  # every role
CONSUMER = "consumer"
PRODUCER = "producer"
ROLES = (CONSUMER, PRODUCER, "admin")

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Prop:
    """One configuration property."""

    name: str
    type: str  # "str" | "int" | "bool" | "enum" | "list" | "callable"
    default: Any
    doc: str
    role: str = CLIENT  # CLIENT, CONSUMER or PRODUCER
    choices: tuple[str, ...] = ()  # for "enum", and the allowed items of a "list"
    value_aliases: Mapping[str, str] = field(default_factory=dict)  # accepted spellings -> canonical
    min: int | None = None
    max: int | None = None
    aliases: tuple[str, ...] = ()  # other names for the same property
    unsupported: Mapping[Any, str] = field(default_factory=dict)  # value -> why it is refused
    secret: bool = False  # a credential: masked in repr() and never logged

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")


def _p(*args: Any, **kw: Any) -> Prop:
    return Prop(*args, **kw)


_OFFSET_RESET_ALIASES = {"smallest": "earliest", "beginning": "earliest",
                         "largest": "latest", "end": "latest", "none": "error"}

_DEBUG_CONTEXTS = ("all", "generic", "broker", "topic", "metadata", "protocol", "consumer", "cgrp",
                   "fetch", "msg", "producer", "queue", "security", "conf", "admin")

_PARTITIONERS = ("murmur2_random", "murmur2", "consistent_random", "consistent", "random",
                 "fnv1a_random", "fnv1a")

PROPERTIES: tuple[Prop, ...] = (
    # --- every client ------------------------------------------------------------------
    _p("bootstrap.servers", "list", [], "Initial brokers as host:port, comma-separated; tried in "
       "turn until one answers.  Required.", aliases=("metadata.broker.list",)),
    _p("client.id", "str", "kwire", "Client identifier sent in every request header."),
    _p("client.rack", "str", "", "Rack of this client, sent in Fetch requests (KIP-392) so a "
       "broker may direct fetches to a replica in the same rack."),
    _p("security.protocol", "enum", "plaintext", "Protocol to talk to brokers: plaintext, ssl "
       "(TLS), sasl_plaintext (SASL over TCP), sasl_ssl (SASL over TLS).",
       choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    _p("ssl.ca.location", "str", None, "PEM file (or directory of hashed PEM files) of the CA "
       "certificates that sign the brokers' certificates.  Unset: the system's default CAs."),
    _p("ssl.certificate.location", "str", None, "PEM file of the client's certificate (chain), "
       "for brokers that require client certificates (mutual TLS)."),
    _p("ssl.key.location", "str", None, "PEM file of the client certificate's private key (may "
       "be the certificate file itself)."),
    _p("ssl.key.password", "str", None, "Password of an encrypted ssl.key.location.",
       secret=True),
    _p("ssl.endpoint.identification.algorithm", "enum", "https", "https: the broker's "
       "certificate must name the host we connect to (hostname verification); none: any name "
       "is accepted (the chain is still verified).", choices=("https", "none")),
    _p("enable.ssl.certificate.verification", "bool", True, "Verify the broker's certificate "
       "chain.  false accepts any certificate -- for tests only: it gives up all protection "
       "against a man in the middle."),
    _p("sasl.mechanism", "enum", "plain", "SASL mechanism for sasl_plaintext / sasl_ssl: PLAIN, "
       "SCRAM-SHA-256 or SCRAM-SHA-512 (case-insensitive).",
       choices=("plain", "scram-sha-256", "scram-sha-512"), aliases=("sasl.mechanisms",)),
    _p("sasl.username", "str", None, "SASL user name (PLAIN, SCRAM).", aliases=("sasl.user",)),
    _p("sasl.password", "str", None, "SASL password (PLAIN, SCRAM).  Never logged nor traced.",
       secret=True),
    _p("socket.timeout.ms", "int", 60000, "Default timeout of blocking network operations "
       "(metadata look-ups, admin calls) when the caller gives none.", min=10, max=300000),
    _p("request.timeout.ms", "int", 30000, "How long a request may wait for its response before "
       "it fails with KafkaTimeoutError.", min=1, max=900000),
    _p("socket.connection.setup.timeout.ms", "int", 30000, "Maximum time to establish a TCP "
       "connection and negotiate ApiVersions.", min=1000, max=INT32_MAX),
    _p("socket.connection.setup.stall.ms", "int", 2000, "A connection being set up (TCP connect, "
       "TLS, ApiVersions, SASL) that makes no progress -- no state change, no byte received -- for "
       "this long is given up and tried again after the reconnect backoff; each consecutive "
       "stalled attempt of that broker waits twice as long, up to "
       "socket.connection.setup.timeout.ms.  A path that swallowed a connection (a blackhole "
       "that has since lifted) then costs seconds, not the whole setup timeout.",
       min=100, max=INT32_MAX),
    _p("reconnect.backoff.ms", "int", 100, "Initial wait before reconnecting to a broker; doubles "
       "per failed attempt (with +-20% jitter) up to reconnect.backoff.max.ms.",
       min=0, max=3600000),
    _p("reconnect.backoff.max.ms", "int", 10000, "Upper bound of the reconnect backoff.",
       min=0, max=3600000),
    _p("retry.backoff.ms", "int", 100, "Wait before retrying a failed request.", min=1,
       max=300000),
    _p("metadata.max.age.ms", "int", 900000, "Cluster metadata older than this is refreshed "
       "(librdkafka's default; Java's is 300000).", min=1, max=86400000),
    _p("receive.message.max.bytes", "int", 100000000, "Largest response frame accepted; a frame "
       "claiming more (plus 64 KiB of slack) is a protocol error and closes the connection.",
       min=1000, max=INT32_MAX),
    _p("debug", "list", [], "Comma-separated debug contexts.  'protocol' (or 'all') logs every "
       "request and response on the 'kwire.protocol' logger at DEBUG.", choices=_DEBUG_CONTEXTS),
    _p("allow.auto.create.topics", "bool", False, "Let metadata requests create missing topics "
       "(when the broker allows it).  Consumers default to false; producers to true unless it "
       "is set (as librdkafka)."),
    _p("error_cb", "callable", None, "Called with a KwireError for errors not tied to one "
       "request (as confluent-kafka's error_cb)."),
    _p("logger", "callable", None, "A logging.Logger to use instead of the 'kwire' loggers."),
    _p("statistics.interval.ms", "int", 0, "Consumer and producer: every this many ms, "
       "stats_cb gets librdkafka's statistics JSON (see kwire.stats for the fields), from "
       "poll()/consume()/flush() on the application's thread.  0: off (no cost).",
       min=0, max=86400000),
    _p("stats_cb", "callable", None, "Called with the statistics JSON (a str) every "
       "statistics.interval.ms (as confluent-kafka's stats_cb)."),
    # --- consumer ----------------------------------------------------------------------
    _p("group.id", "str", None, "Consumer group id.  Required for subscribe() and commits.",
       role=CONSUMER),
    _p("group.instance.id", "str", None, "Static membership id (KIP-345).", role=CONSUMER),
    _p("group.protocol", "enum", "classic", "Group protocol: classic (JoinGroup/SyncGroup, "
       "assignors run by the group leader) or consumer (KIP-848: ConsumerGroupHeartbeat, the "
       "broker assigns; Kafka 4.0+).  With consumer, session.timeout.ms, heartbeat.interval.ms "
       "and partition.assignment.strategy are the broker's (group.consumer.*) and setting them "
       "is refused.", role=CONSUMER, choices=("classic", "consumer")),
    _p("group.remote.assignor", "str", None, "group.protocol=consumer: the broker-side assignor "
       "to ask for (uniform, range); unset: the broker's default.", role=CONSUMER),
    _p("session.timeout.ms", "int", 45000, "Group session timeout: a member whose heartbeats "
       "stop for this long is removed.", role=CONSUMER, min=1, max=3600000),
    _p("heartbeat.interval.ms", "int", 3000, "Interval between group heartbeats.", role=CONSUMER,
       min=1, max=3600000),
    _p("max.poll.interval.ms", "int", 300000, "Maximum time between poll() calls before the "
       "member leaves the group.", role=CONSUMER, min=1, max=86400000),
    _p("partition.assignment.strategy", "list", ["range", "roundrobin"], "Assignors offered to "
       "the group, in order of preference.", role=CONSUMER,
       choices=("range", "roundrobin", "cooperative-sticky")),
    _p("enable.auto.commit", "bool", True, "Commit consumed offsets in the background every "
       "auto.commit.interval.ms.", role=CONSUMER),
    _p("auto.commit.interval.ms", "int", 5000, "Period of automatic commits.", role=CONSUMER,
       min=0, max=86400000),
    _p("enable.auto.offset.store", "bool", True, "Store the offset of each message returned by "
       "poll() for the next commit.", role=CONSUMER),
    _p("auto.offset.reset", "enum", "latest", "Where to start without a committed offset (or "
       "when it is out of range): earliest, latest, or error.  librdkafka's aliases smallest, "
       "beginning (= earliest), largest, end (= latest) and Java's none (= error) are accepted.", role=CONSUMER,
       choices=("earliest", "latest", "error"), value_aliases=_OFFSET_RESET_ALIASES),
    _p("isolation.level", "enum", "read_committed", "Whether to return records of aborted "
       "transactions (librdkafka's default; Java's is read_uncommitted).", role=CONSUMER,
       choices=("read_committed", "read_uncommitted")),
    _p("fetch.min.bytes", "int", 1, "Minimum bytes a broker gathers before answering a Fetch.",
       role=CONSUMER, min=1, max=100000000),
    _p("fetch.wait.max.ms", "int", 500, "Longest a broker waits for fetch.min.bytes.",
       role=CONSUMER, min=0, max=300000, aliases=("fetch.max.wait.ms",)),
    _p("fetch.max.bytes", "int", 52428800, "Maximum bytes per Fetch response.  The consumer asks "
       "for at most 12 MiB (and a quarter of queued.max.messages.kbytes) per answer: measured, "
       "larger answers read slower, being read whole before their first record is decoded "
       "(an explicit max.partition.fetch.bytes above that raises it).", role=CONSUMER,
       min=0, max=2147483135),
    _p("max.partition.fetch.bytes", "int", 1048576, "Maximum bytes per partition per Fetch.  Not "
       "given, the consumer shares each node's answer (see fetch.max.bytes) among the partitions "
       "it fetches from that node, 1 MiB (this default) at least -- three partitions ask for 4 MiB "
       "each, twelve or more for 1 MiB -- so few partitions do not leave it waiting on the broker "
       "with small answers; Spark read tasks ask for 4 MiB.  Given, it is used as given.",
       role=CONSUMER, min=1, max=1000000000, aliases=("fetch.message.max.bytes",)),
    _p("queued.max.messages.kbytes", "int", 65536, "Maximum KiB of memory for fetched records "
       "buffered ahead of poll(), summed over partitions, whatever the compression: record sets "
       "wait as fetched (compressed) and are decoded a piece at a time as the application "
       "consumes; decoded records count with their decompressed key, value and header bytes "
       "plus ~128 bytes of Python objects each.  A quarter of it (at most 8 MiB) is for "
       "decoded records waiting, an eighth (at most 8 MiB) for batches decompressed ahead by "
       "the decompression worker, the rest for fetched bytes.  On top comes the batch being "
       "decoded (at most fetch.max.decompressed.bytes).", role=CONSUMER, min=1, max=2097151),
    _p("fetch.max.decompressed.bytes", "int", 64 * 1024 * 1024, "Most bytes one fetched "
       "record batch (or legacy compressed message) may decompress to; a batch that expands "
       "further raises DecompressionLimitError (a CorruptRecordError naming the partition and "
       "offset) from poll()/consume() instead of exhausting memory (a decompression bomb).  "
       "Decompression stops at the limit.  The default, 64 MiB, is 64 times the largest "
       "compressed batch Kafka accepts by default (message.max.bytes, ~1 MiB): raise it if "
       "your topics allow bigger batches of very compressible data.  It bounds one batch; "
       "queued.max.messages.kbytes bounds the records buffered ahead of the application.",
       role=CONSUMER,
       min=1024, max=INT32_MAX),
    _p("check.crcs", "bool", False, "Verify the CRC32C of fetched record batches.",
       role=CONSUMER),
    _p("enable.partition.eof", "bool", False, "Report reaching the end of a partition as an "
       "event from poll().", role=CONSUMER),

    _p("on_commit", "callable", None, "Called (err, partitions) after each commit.",
       role=CONSUMER),
    # --- producer ----------------------------------------------------------------------
    _p("acks", "enum", "all", "Acknowledgements the leader waits for: 0 (none, no response), "
       "1 (leader only), all / -1 (all in-sync replicas).", role=PRODUCER,
       choices=("0", "1", "all"), value_aliases={"-1": "all"},
       aliases=("request.required.acks",)),
    _p("linger.ms", "int", 5, "How long to wait for more records before sending a batch.",
       role=PRODUCER, min=0, max=900000, aliases=("queue.buffering.max.ms",)),
    _p("batch.size", "int", 1000000, "Maximum bytes of one record batch (librdkafka's default; "
       "Java's is 16384).", role=PRODUCER, min=1, max=INT32_MAX),
    _p("batch.num.messages", "int", 10000, "Maximum records in one record batch.",
       role=PRODUCER, min=1, max=1000000),
    _p("compression.type", "enum", "none", "Compression of produced batches.", role=PRODUCER,
       choices=("none", "gzip", "snappy", "lz4", "zstd"), aliases=("compression.codec",)),
    _p("message.max.bytes", "int", 1000000, "Largest record (and Produce request batch) the "
       "producer will build.", role=PRODUCER, min=1000, max=1000000000),
    _p("retries", "int", INT32_MAX, "How often a retriable failure of a batch is retried "
       "(bounded by delivery.timeout.ms).", role=PRODUCER, min=0, max=INT32_MAX,
       aliases=("message.send.max.retries",)),
    _p("delivery.timeout.ms", "int", 300000, "Upper bound on the time from produce() to a "
       "delivery report, retries included.", role=PRODUCER, min=0, max=INT32_MAX,
       aliases=("message.timeout.ms",)),
    _p("queue.buffering.max.messages", "int", 100000, "Maximum records waiting in the producer; "
       "produce() raises BufferError beyond it.", role=PRODUCER, min=0, max=INT32_MAX),
    _p("partitioner", "enum", "murmur2_random", "How keys map to partitions.  murmur2_random "
       "(kwire's default) is the Java client's: murmur2(key) & 0x7fffffff %% partitions, null "
       "keys spread.  consistent_random is librdkafka's / confluent-kafka's default: "
       "CRC32(key) %% partitions.  fnv1a_random is Sarama's.  The plain variants (no _random) also "
       "hash null keys.", role=PRODUCER, choices=_PARTITIONERS),
    _p("enable.idempotence", "bool", False, "Idempotent producer (KIP-98): a producer id and "
       "per-partition sequence numbers, so a retry never writes a batch twice and order holds.  "
       "Needs acks=all and retries > 0.  Off by default, as in librdkafka (Java's default is on).  "
       "Implied by transactional.id.", role=PRODUCER),
    _p("transactional.id", "str", None, "Makes the producer transactional (KIP-98): "
       "init_transactions(), begin/commit/abort_transaction(), send_offsets_to_transaction().  "
       "A newer producer with the same id fences this one.  Implies enable.idempotence.",
       role=PRODUCER),
    _p("enable.gapless.guarantee", "bool", False, "librdkafka's (experimental) fatal error when an "
       "idempotent producer's failed batch would leave a gap.  kwire renews the producer id "
       "instead, as librdkafka does without it; true is refused.", role=PRODUCER,
       unsupported={True: "kwire renews the producer id after a failed batch (a gap), as librdkafka "
                          "does by default; it does not offer the fatal variant"}),
    _p("transaction.timeout.ms", "int", 60000, "How long the coordinator lets a transaction "
       "stay open before aborting it (at most the broker's transaction.max.timeout.ms).",
       role=PRODUCER, min=1000, max=INT32_MAX),
    _p("on_delivery", "callable", None, "Default delivery callback (err, message).",
       role=PRODUCER, aliases=("delivery.report.cb",)),
)

_BY_NAME: dict[str, Prop] = {}
for _prop in PROPERTIES:
    for _n in (_prop.name, *_prop.aliases):
        _BY_NAME[_n] = _prop
_BY_ATTR: dict[str, Prop] = {p.attr: p for p in PROPERTIES}

_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


def lookup(name: str) -> Prop:
    prop = _BY_NAME.get(name)
    if prop is None:
        raise ConfigError(f"unknown configuration property {name!r}")
    return prop


def _bad(name: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"invalid value {value!r} for configuration property {name!r}: {why}")


def coerce(prop: Prop, value: Any, *, name: str | None = None) -> Any:
    """``value`` checked and converted to ``prop``'s type; ConfigError names the property
    (and, for a secret, not the value)."""
    name = name or prop.name
    if prop.secret and value is not None and not isinstance(value, str):
        raise ConfigError(f"invalid value for configuration property {name!r}: expected a string")
    t = prop.type
    if value is None:
        if prop.default is None or t in ("callable",):
            return None
        raise _bad(name, value, "may not be None")
    if t == "str":
        if not isinstance(value, str):
            raise _bad(name, value, "expected a string")
        out: Any = value
    elif t == "bool":
        if isinstance(value, bool):
            out = value
        elif isinstance(value, int) and value in (0, 1):
            out = bool(value)
        elif isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            out = value.strip().lower() in _TRUE
        else:
            raise _bad(name, value, "expected a boolean (true/false)")
    elif t == "int":
        if isinstance(value, bool):
            raise _bad(name, value, "expected an integer")
        if isinstance(value, int):
            out = value
        elif isinstance(value, float) and value.is_integer():
            out = int(value)
        elif isinstance(value, str):
            try:
                out = int(value.strip())
            except ValueError:
                raise _bad(name, value, "expected an integer") from None
        else:
            raise _bad(name, value, "expected an integer")
        if prop.min is not None and out < prop.min:
            raise _bad(name, value, f"below the minimum {prop.min}")
        if prop.max is not None and out > prop.max:
            raise _bad(name, value, f"above the maximum {prop.max}")
    elif t == "enum":
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise _bad(name, value, f"expected one of {', '.join(prop.choices)}")
        text = str(value).strip().lower()
        text = prop.value_aliases.get(text, text)
        if text not in prop.choices:
            raise _bad(name, value, f"expected one of {', '.join(prop.choices)}")
        out = text
    elif t == "list":
        if isinstance(value, str):
            items = [s.strip() for s in value.split(",")]
        elif isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
            items = [s.strip() for s in value]
        else:
            raise _bad(name, value, "expected a comma-separated string or a list of strings")
        items = [s for s in items if s]
        if prop.choices:
            items = [s.lower() for s in items]
            for s in items:
                if s not in prop.choices:
                    raise _bad(name, value, f"{s!r} is not one of {', '.join(prop.choices)}")
        out = items
    elif t == "callable":
        if not callable(value):
            raise _bad(name, value, "expected a callable")
        out = value
    else:  # pragma: no cover - a table bug
        raise AssertionError(f"unknown property type {t}")
    if prop.unsupported and not isinstance(out, list) and out in prop.unsupported:
        raise _bad(name, value, prop.unsupported[out])
    return out


class Config(Mapping[str, Any]):
    """Checked configuration values: ``cfg["linger.ms"]`` or ``cfg.linger_ms``.

    Holds every property (defaults filled in), read-only.  ``user`` is what was
    given explicitly (canonical names).
    """

    __slots__ = ("_values", "role", "user")

    def __init__(self, values: dict[str, Any], role: str, user: dict[str, Any]):
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "role", role)
        object.__setattr__(self, "user", user)

    def __getitem__(self, name: str) -> Any:
        prop = _BY_NAME.get(name)
        if prop is None:
            raise KeyError(name)
        return self._values[prop.name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, attr: str) -> Any:
        prop = _BY_ATTR.get(attr)
        if prop is None:
            raise AttributeError(f"no configuration property {attr.replace('_', '.')!r}")
        return self._values[prop.name]

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError("Config is read-only; use replace()")

    def replace(self, **overrides: Any) -> Config:
        """A copy with some values changed: ``cfg.replace(**{"linger.ms": 0})``."""
        merged = dict(self.user)
        merged.update(overrides)
        return parse_config(merged, role=self.role)

    def debug_enabled(self, context: str) -> bool:
        dbg = self._values.get("debug") or []
        return context in dbg or "all" in dbg

    def __repr__(self) -> str:
        shown = {k: ("<redacted>" if _BY_NAME[k].secret and v is not None else v) for k, v in self.user.items()}
        return f"Config(role={self.role!r}, {shown!r})"


_log = logging.getLogger("kwire.config")


def parse_config(user: Mapping[str, Any] | None = None, role: str = "consumer", **kw: Any) -> Config:
    """Check ``user`` (a confluent-kafka style dict) for ``role`` and fill in defaults.

    Unknown keys and bad values raise ConfigError naming the key.  A property of the other role
    (e.g. ``linger.ms`` given to a consumer) is accepted and ignored, as librdkafka does.
    Keyword arguments use underscores: ``parse_config(bootstrap_servers="h:9092")``.
    """
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    if isinstance(user, Config):
        user = user.user
    given: dict[str, Any] = dict(user or {})
    for attr, value in kw.items():
        prop = _BY_ATTR.get(attr)
        if prop is None:
            raise ConfigError(f"unknown configuration property {attr.replace('_', '.')!r}")
        given[prop.name] = value
    values: dict[str, Any] = {}
    explicit: dict[str, Any] = {}
    for name, value in given.items():
        if not isinstance(name, str):
            raise ConfigError(f"configuration property names are strings, got {name!r}")
        prop = lookup(name)
        explicit[prop.name] = coerce(prop, value, name=name)
        if prop.role not in (CLIENT, role) and role != "admin":
            _log.debug("%s is a %s property; ignored by a %s", name, prop.role, role)
    for prop in PROPERTIES:  # every property has a value, whatever the role
        values[prop.name] = explicit.get(prop.name, _copy_default(prop.default))
    if values["reconnect.backoff.max.ms"] < values["reconnect.backoff.ms"]:
        values["reconnect.backoff.max.ms"] = values["reconnect.backoff.ms"]
    if role == CONSUMER and values.get("heartbeat.interval.ms", 0) >= values.get("session.timeout.ms", 1):
        if "heartbeat.interval.ms" in explicit:
            raise ConfigError("invalid value for configuration property 'heartbeat.interval.ms': "
                              "must be lower than session.timeout.ms")
    if role == CONSUMER and values["group.protocol"] == "classic" and \
            values.get("max.poll.interval.ms", 1) < values.get("session.timeout.ms", 0):
        # (as librdkafka: the member would be expelled for not polling before its session
        # could even notice it had gone)
        raise ConfigError("invalid value for configuration property 'max.poll.interval.ms': "
                          "must be >= session.timeout.ms")
    if role == CONSUMER and values["group.protocol"] == "consumer":
        # (as Kafka's Java consumer and librdkafka: under KIP-848 the broker owns these)
        for name in ("session.timeout.ms", "heartbeat.interval.ms",
                     "partition.assignment.strategy"):
            if name in explicit:
                raise ConfigError(f"configuration property {name!r} is not supported with "
                                  "group.protocol=consumer: the broker sets it (group.consumer."
                                  f"{'assignors' if name.startswith('partition') else name})")
    if role == PRODUCER:
        _check_idempotence(values, explicit)
    return Config(values, role, explicit)


def _check_idempotence(values: dict[str, Any], explicit: dict[str, Any]) -> None:
    """enable.idempotence / transactional.id need acks=all and retries (as librdkafka and
    Java check): a conflict the user wrote is a ConfigError; defaults are adjusted."""
    if values["transactional.id"] is not None:
        if explicit.get("enable.idempotence") is False:
            raise ConfigError("configuration property 'enable.idempotence' must not be false "
                              "when 'transactional.id' is set")
        values["enable.idempotence"] = True
    if not values["enable.idempotence"]:
        return
    if values["acks"] != "all":
        raise ConfigError("configuration property 'acks' must be 'all' (-1) when "
                          "enable.idempotence is true")
    if values["retries"] == 0:
        raise ConfigError("configuration property 'retries' must be > 0 when "
                          "enable.idempotence is true")


def _copy_default(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def render_markdown() -> str:
    """docs/CONFIG.md: the table above, as Markdown."""
    lines = ["# kwire configuration properties", "",
             "Generated from `kwire/config.py` by `python -m kwire.config` — do not edit.", "",
             "Names follow librdkafka / the Java client; defaults follow librdkafka where they "
             "differ.  Unknown properties and bad values raise `ConfigError` naming the key.", ""]
    for role, title in ((CLIENT, "Every client"), (CONSUMER, "Consumer"), (PRODUCER, "Producer")):
        lines += [f"## {title}", "", "| Property | Type | Default | Allowed | Description |",
                  "| --- | --- | --- | --- | --- |"]
        for p in PROPERTIES:
            if p.role != role:
                continue
            allowed = ""
            if p.choices:
                allowed = ", ".join(c for c in p.choices if c not in p.unsupported)
                if p.value_aliases:
                    allowed += " (aliases: " + ", ".join(f"{a}={c}" for a, c in p.value_aliases.items()) + ")"
            elif p.min is not None:
                allowed = f"{p.min} .. {p.max}"
            default = p.default
            if isinstance(default, list):
                default = ",".join(default)
            name = f"`{p.name}`"
            if p.aliases:
                name += " (alias " + ", ".join(f"`{a}`" for a in p.aliases) + ")"
            doc = p.doc.replace("%%", "%").replace("|", "\\|")
            lines.append(f"| {name} | {p.type} | `{default!r}` | {allowed} | {doc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(render_markdown())
