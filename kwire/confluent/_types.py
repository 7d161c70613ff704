"""confluent-kafka's value types over kwire's: KafkaError, KafkaException, Message,
TopicPartition, and the conversions from kwire's errors and records.

A consumed :class:`Message` wraps a :class:`kwire.records.Record` (one object and two slots per
record; no field is copied); ``set_*()`` or construction moves the fields into a dict first.
"""
from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypedDict, overload

from .. import _impl
from .. import errors as _kerr
from ..consumer.types import TopicPartition as _KTopicPartition
from ._codes import CODES

# --- error codes ------------------------------------------------------------------------------

_NAME = {code: name for code, name, _ in CODES}
_DESC = {code: desc for code, _, desc in CODES}

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001


class KafkaException(Exception):
    """confluent-kafka's exception: ``args[0]`` is a :class:`KafkaError` (or whatever the
    caller passed)."""


if TYPE_CHECKING:
    class _CodeNames(type):
        """For the type checker only: ``KafkaError.<NAME>`` is an int (set from CODES below)."""

        def __getattr__(cls, name: str) -> int: ...
else:
    _CodeNames = type


class KafkaError(KafkaException, metaclass=_CodeNames):
    """An error or event, as confluent-kafka's ``KafkaError``: a librdkafka error code (negative:
    client-side, ``_PARTITION_EOF`` etc.; non-negative: the broker's), its name and description,
    and the fatal / retriable / txn_requires_abort flags.  Compares and hashes as its code.

    Unlike confluent-kafka's (which is not a real exception class) it derives from
    :class:`KafkaException`, so ``raise KafkaError(...)`` is caught by ``except KafkaException``
    and ``args[0]`` is the error itself, as after ``raise KafkaException(KafkaError(...))``.
    """

    def __init__(self, error: int, reason: str | None = None, fatal: bool = False,
                 retriable: bool = False, txn_requires_abort: bool = False) -> None:
        if isinstance(error, bool) or not isinstance(error, int):
            raise TypeError("an integer is required (error code)")
        self._code = error
        self._str = reason
        self._fatal = bool(fatal)
        self._retriable = bool(retriable)
        self._txn_requires_abort = bool(txn_requires_abort)
        super().__init__(self)

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _NAME.get(self._code) or f"ERR_{self._code}?"

    def str(self) -> str:
        if self._str is not None:
            return self._str
        return _DESC.get(self._code) or f"Err-{self._code}?"

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    def __repr__(self) -> builtins.str:  # (``str`` here is the method above)
        return (f"KafkaError{{{'FATAL,' if self._fatal else ''}code={self.name()},"
                f"val={self._code},str=\"{self.str()}\"}}")

    __str__ = __repr__

    def __hash__(self) -> int:
        return hash(self._code)

    def _other(self, other: object) -> int | None:
        if isinstance(other, KafkaError):
            return other._code
        if isinstance(other, int):
            return other
        return None

    def __eq__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._code == o

    def __ne__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._code != o

    def __lt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._code < o

    def __le__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._code <= o

    def __gt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._code > o

    def __ge__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._code >= o

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaError, (self._code, self._str, self._fatal, self._retriable,
                             self._txn_requires_abort))


for _code, _name, _ in CODES:  # KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART, ...
    setattr(KafkaError, _name, _code)
# librdkafka's range markers (not errors themselves)
for _name, _code in (("_BEGIN", -200), ("_END", -100), ("END_ALL", max(c for c, _, _ in CODES) + 1)):
    setattr(KafkaError, _name, _code)
del _code, _name

# kwire's client-side failures -> librdkafka's local error codes (most specific class first)
_LOCAL = tuple((cls, code) for cls, code in (
    (getattr(_kerr, "MaxPollIntervalExceededError", None), KafkaError._MAX_POLL_EXCEEDED),
    (getattr(_kerr, "NotAssignedError", None), KafkaError._UNKNOWN_PARTITION),
    # a commit refused while the group rebalances: librdkafka reports the broker's code
    (_kerr.RebalanceInProgressError, KafkaError.REBALANCE_IN_PROGRESS),
    (_kerr.ConcurrentUseError, KafkaError._STATE),
    (_kerr.NotTransactionalError, KafkaError._NOT_CONFIGURED),
    (_kerr.TransactionStateError, KafkaError._STATE),
    (_kerr.ConsumerClosedError, KafkaError._DESTROY),
    (_kerr.DecompressionLimitError, KafkaError._BAD_MSG),
    (_kerr.DataLossError, KafkaError._FAIL),
    (_kerr.SslAuthenticationError, KafkaError._SSL),
    (_kerr.AuthenticationError, KafkaError._AUTHENTICATION),
    (_kerr.KafkaTimeoutError, KafkaError._TIMED_OUT),
    (_kerr.KafkaConnectionError, KafkaError._TRANSPORT),
    (_kerr.ConfigError, KafkaError._INVALID_ARG),
    (_kerr.NoOffsetForPartitionError, KafkaError._AUTO_OFFSET_RESET),
    (_kerr.LogTruncationError, KafkaError._LOG_TRUNCATION),
    (_kerr.UnsupportedCompressionError, KafkaError._NOT_IMPLEMENTED),
    (_kerr.CorruptRecordError, KafkaError._BAD_MSG),
    (_kerr.ProtocolError, KafkaError._BAD_MSG),
    (_kerr.UnsupportedVersionError, KafkaError._UNSUPPORTED_FEATURE),
    (_kerr.CommitFailedError, KafkaError._FAIL),
) if cls is not None)


@overload
def to_kafka_error(exc: BaseException, *, fatal: bool = False) -> KafkaError: ...
@overload
def to_kafka_error(exc: None, *, fatal: bool = False) -> None: ...
@overload
def to_kafka_error(exc: BaseException | None, *, fatal: bool = False) -> KafkaError | None: ...
def to_kafka_error(exc: BaseException | None, *, fatal: bool = False) -> KafkaError | None:
    """The KafkaError for a kwire exception (None stays None).  Broker errors keep their code
    and retriable flag; client-side failures take librdkafka's local code; the text is kwire's."""
    if exc is None:
        return None
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    if isinstance(exc, _kerr.PurgedError):
        code = KafkaError._PURGE_INFLIGHT if exc.in_flight else KafkaError._PURGE_QUEUE
        return KafkaError(code, _DESC.get(code), fatal=fatal)
    if isinstance(exc, _kerr.ProducerFatalError):
        cause = to_kafka_error(exc.cause)
        assert cause is not None
        # librdkafka reports a fenced producer as _FENCED; other fatal errors keep their code
        code = KafkaError._FENCED if cause.code() in (47, 90) else cause.code()
        return KafkaError(code, str(exc), fatal=True)
    if isinstance(exc, _kerr.TransactionAbortRequiredError):
        cause = to_kafka_error(exc.cause)
        assert cause is not None
        return KafkaError(cause.code(), str(exc), txn_requires_abort=True)
    if isinstance(exc, _kerr.BrokerError):
        text = exc.broker_message or _DESC.get(exc.code) or str(exc)
        return KafkaError(exc.code, text, fatal=fatal, retriable=bool(exc.retriable))
    for cls, code in _LOCAL:
        if isinstance(exc, cls):
            return KafkaError(code, str(exc) or None, fatal=fatal,
                              retriable=code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                                                 KafkaError.REBALANCE_IN_PROGRESS))
    return KafkaError(KafkaError._FAIL, f"{type(exc).__name__}: {exc}", fatal=fatal)


def to_kafka_exception(exc: BaseException) -> KafkaException:
    if isinstance(exc, KafkaException):
        return exc
    return KafkaException(to_kafka_error(exc))


# --- TopicPartition -----------------------------------------------------------------------------

class TopicPartition(_KTopicPartition):
    """confluent-kafka's TopicPartition: ``topic`` (read-only), ``partition``, ``offset``,
    ``metadata``, ``leader_epoch`` (None when unknown), ``error`` (a KafkaError or None).

    Ordered by (topic, partition), all six comparisons; equal and hashed by (topic, partition).
    Comparing with anything else raises NotImplementedError, as confluent-kafka does.  A kwire
    TopicPartition, so kwire's consumer takes it as it is."""

    __slots__ = ()

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID,
                 metadata: str | None = None, leader_epoch: int | None = -1):
        if not isinstance(topic, str):
            raise TypeError("topic must be a str")
        for what, v in (("partition", partition), ("offset", offset)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{what}: '{type(v).__name__}' object cannot be interpreted as an integer")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError("metadata must be a str")
        if leader_epoch is not None and leader_epoch < 0:
            leader_epoch = None
        sa = object.__setattr__
        sa(self, "topic", topic)
        sa(self, "partition", partition)
        sa(self, "offset", offset)
        sa(self, "metadata", metadata)
        sa(self, "leader_epoch", leader_epoch)
        sa(self, "error", None)

    def __setattr__(self, name: str, value: object) -> None:
        if name in _READONLY:
            raise AttributeError("readonly attribute")
        object.__setattr__(self, name, value)

    def _key(self, other: object) -> tuple[tuple[str, int], tuple[str, int]]:
        if not isinstance(other, _KTopicPartition):
            raise NotImplementedError
        return (self.topic, self.partition), (other.topic, other.partition)

    def __eq__(self, other: object) -> bool:
        a, b = self._key(other)
        return a == b

    def __ne__(self, other: object) -> bool:
        a, b = self._key(other)
        return a != b

    def __lt__(self, other: object) -> bool:
        a, b = self._key(other)
        return a < b

    def __le__(self, other: object) -> bool:
        a, b = self._key(other)
        return a <= b

    def __gt__(self, other: object) -> bool:
        a, b = self._key(other)
        return a > b

    def __ge__(self, other: object) -> bool:
        a, b = self._key(other)
        return a >= b

    def __hash__(self) -> int:
        return hash(self.topic) ^ self.partition

    def __repr__(self) -> str:
        le = "None" if self.leader_epoch is None else self.leader_epoch
        err = "None" if self.error is None else str(self.error)
        return (f"TopicPartition{{topic={self.topic},partition={self.partition},"
                f"offset={self.offset},leader_epoch={le},error={err}}}")

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopicPartition, (self.topic, self.partition, self.offset, self.metadata,
                                 -1 if self.leader_epoch is None else self.leader_epoch))


_READONLY = frozenset({"topic", "metadata", "error"})  # as confluent-kafka's; the adapter
# sets them with object.__setattr__


def _tp(k: Any, error: BaseException | None = None) -> TopicPartition:
    """A confluent TopicPartition from a kwire one (or a (topic, partition) tuple)."""
    if isinstance(k, tuple):
        return TopicPartition(k[0], k[1])
    out = TopicPartition(k.topic, k.partition, k.offset, k.metadata or None,
                         -1 if k.leader_epoch is None else k.leader_epoch)
    err = error if error is not None else k.error
    if err is not None:
        object.__setattr__(out, "error", to_kafka_error(err))
    return out


def _tps(ks: Iterable[Any]) -> list[TopicPartition]:
    return [_tp(k) for k in ks]


# --- Message ---------------------------------------------------------------------------------------

class _Fields(TypedDict):
    """A Message's fields once set or constructed (None: unknown / none)."""
    topic: str | None
    partition: int | None
    offset: int | None
    key: Any
    value: Any
    headers: Any
    error: KafkaError | None
    timestamp: tuple[int, int]  # (confluent's type, ms)
    latency: float | None
    leader_epoch: int | None


class PyMessage:
    """A consumed or produced message, or an event (``error()`` is not None), with
    confluent-kafka's methods.  Constructible with the same keywords::

        Message(topic="t", partition=0, offset=5, key=b"k", value=b"v",
                headers=[("h", b"1")], timestamp=(TIMESTAMP_CREATE_TIME, 1700000000000))

    ``partition()`` / ``offset()`` / ``leader_epoch()`` / ``latency()`` are None when unknown;
    ``headers()`` None when there are none; ``timestamp()`` ``(type, ms)`` with confluent's
    numbering (CreateTime 1, LogAppendTime 2, not available 0).
    """

    __slots__ = ("_r", "_f")  # a kwire Record, or None; the fields dict once set or constructed
    _r: Any
    _f: _Fields | None

    def __init__(self, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, key: Any = None, value: Any = None, headers: Any = None,
                 error: KafkaError | None = None, timestamp: tuple[int, int] | None = None,
                 latency: float | None = None, leader_epoch: int | None = None) -> None:
        if timestamp is not None and (not isinstance(timestamp, tuple) or len(timestamp) != 2):
            raise TypeError("timestamp must be a tuple of (int, int)")
        self._r = None
        self._f = {
            "topic": topic,
            "partition": None if partition is None or partition < 0 else partition,
            "offset": None if offset is None or offset < 0 else offset,
            "key": key, "value": value, "headers": headers, "error": error,
            "timestamp": (TIMESTAMP_NOT_AVAILABLE, 0) if timestamp is None else
            (int(timestamp[0]), int(timestamp[1])),
            "latency": None if latency is None or latency < 0 else float(latency),
            "leader_epoch": None if leader_epoch is None or leader_epoch < 0 else leader_epoch,
        }

    # The record path: poll()/consume() wrap each kwire Record without copying a field.
    def topic(self) -> str | None:
        f = self._f
        return self._r.topic if f is None else f["topic"]

    def partition(self) -> int | None:
        f = self._f
        return self._r.partition if f is None else f["partition"]

    def offset(self) -> int | None:
        f = self._f
        return self._r.offset if f is None else f["offset"]

    def key(self) -> Any:
        f = self._f
        return self._r.key if f is None else f["key"]

    def value(self) -> Any:
        f = self._f
        return self._r.value if f is None else f["value"]

    def headers(self) -> Any:
        f = self._f
        if f is None:
            return self._r.headers or None
        return f["headers"]

    def timestamp(self) -> tuple[int, int]:
        f = self._f
        if f is None:
            r = self._r
            # kwire: 0 CreateTime, 1 LogAppendTime, -1 none; confluent: 1, 2, 0
            return (r.timestamp_type + 1, r.timestamp)
        return f["timestamp"]

    def error(self) -> KafkaError | None:
        f = self._f
        return None if f is None else f["error"]

    def leader_epoch(self) -> int | None:
        f = self._f
        if f is None:
            e = self._r.leader_epoch
            return e if e >= 0 else None
        return f["leader_epoch"]

    def deserialized_key(self) -> Any:
        """The key (after a DeserializingConsumer: the deserialized object)."""
        return self.key()

    def deserialized_value(self) -> Any:
        """The value (after a DeserializingConsumer: the deserialized object)."""
        return self.value()

    def delivery_count(self) -> None:
        """Share groups only (KIP-932), which kwire does not implement: None."""
        return None

    def latency(self) -> float | None:
        f = self._f
        return None if f is None else f["latency"]

    def __len__(self) -> int:
        v = self.value()
        return 0 if v is None else len(v)

    def _fields(self) -> _Fields:
        f = self._f
        if f is None:
            r = self._r
            f = self._f = {
                "topic": r.topic, "partition": r.partition, "offset": r.offset, "key": r.key,
                "value": r.value, "headers": r.headers or None, "error": None,
                "timestamp": (r.timestamp_type + 1, r.timestamp), "latency": None,
                "leader_epoch": r.leader_epoch if r.leader_epoch >= 0 else None,
            }
            self._r = None
        return f

    def set_key(self, key: Any) -> None:
        self._fields()["key"] = key

    def set_value(self, value: Any) -> None:
        self._fields()["value"] = value

    def set_headers(self, headers: Any) -> None:
        self._fields()["headers"] = headers

    def set_topic(self, topic: Any) -> None:
        self._fields()["topic"] = topic

    def set_error(self, error: Any) -> None:
        self._fields()["error"] = error

    def _values(self) -> tuple[Any, ...]:
        return (self.topic(), self.partition(), self.offset(), self.key(), self.value(),
                self.headers(), self.error(), self.timestamp(), self.latency(), self.leader_epoch())

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if not isinstance(other, PyMessage):
            return False
        a, b = self._values(), other._values()
        return a[:8] == b[:8] and a[9] == b[9]  # latency is not compared, as in confluent-kafka

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        v = self._values()
        return (type(self), (v[0], -1 if v[1] is None else v[1], -1 if v[2] is None else v[2],
                          v[3], v[4], v[5], v[6], v[7], -1.0 if v[8] is None else v[8],
                          -1 if v[9] is None else v[9]))

    def __repr__(self) -> str:
        e = self.error()
        return (f"<Message {self.topic()}[{self.partition()}]@{self.offset()}"
                f"{' error=' + repr(e) if e is not None else ''}>")


_new = object.__new__


def _pure_wrap(r: Any, _new: Any = _new, _M: type[PyMessage] = PyMessage) -> PyMessage:
    m: PyMessage = _new(_M)
    m._r = r
    m._f = None
    return m


def _pure_wrap_list(records: list[Any]) -> list[PyMessage]:
    return list(map(_pure_wrap, records))


def _pure_make(fields: _Fields) -> PyMessage:
    m = _new(PyMessage)
    m._r = None
    m._f = fields
    return m


# the pure-Python twin (the reference) unless the compiled one (no stub: type[Any]) loads
Message: type[Any] = PyMessage
_wrap, _wrap_list, _make = _pure_wrap, _pure_wrap_list, _pure_make
MESSAGE_IMPLEMENTATION = "python"
if not _impl._pure:
    try:
        import kwire.confluent._message as _message
    except ImportError as exc:
        if _impl._required:
            raise ImportError(f"kwire.confluent._message (compiled) failed to import: {exc}") from exc
        import warnings
        warnings.warn(f"kwire.confluent: compiled Message unavailable ({exc}); using the "
                      "pure-Python twin", RuntimeWarning, stacklevel=2)
    else:
        Message = _message.Message
        _wrap, _wrap_list, _make = _message.wrap, _message.wrap_list, _message.make
        MESSAGE_IMPLEMENTATION = _message.IMPLEMENTATION


def _event(topic: str | None, partition: int | None, offset: int | None,
           error: KafkaError) -> Any:
    """An error/event message (partition EOF, unknown topic, consumer errors)."""
    return _make({"topic": topic,
                  "partition": partition if partition is not None and partition >= 0 else None,
                  "offset": offset if offset is not None and offset >= 0 else None, "key": None,
                  "value": None, "headers": None, "error": error,
                  "timestamp": (TIMESTAMP_NOT_AVAILABLE, -1), "latency": None,
                  "leader_epoch": None})


def _from_report(rep: Any, err: KafkaError | None) -> Any:
    """The Message a delivery callback receives, from a kwire DeliveryReport."""
    off = rep._offset
    part = rep.partition()
    return _make({"topic": rep._topic, "partition": part if part >= 0 else None,
                  "offset": off if off >= 0 else None, "key": rep._key, "value": rep._value,
                  "headers": rep._headers or None, "error": err, "timestamp": rep.timestamp(),
                  "latency": rep.latency(), "leader_epoch": None})
