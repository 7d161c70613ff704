"""Every error kwire raises.

Two families under one root, :class:`KwireError`:

* client-side failures: malformed bytes (:class:`ProtocolError`, :class:`TruncatedError`,
  :class:`CorruptRecordError`), configuration, timeouts, connections;
* broker error codes: :class:`BrokerError` subclasses generated from the one error table in
  :mod:`kwire.protocol.error_codes`, each knowing whether it is retriable and whether it calls
  for a metadata refresh.  Unknown codes still map to :class:`BrokerError` with their number.
"""
from __future__ import annotations


class KwireError(Exception):
    """Root of every exception kwire raises on purpose."""


# --- malformed input ------------------------------------------------------------------

class ProtocolError(KwireError):
    """Bytes that do not form a valid Kafka frame, message or record."""

    def __init__(self, message: str, *, position: int | None = None):
        super().__init__(message)
        self.position = position


class TruncatedError(ProtocolError):
    """The buffer ended before the message or record did."""


class TrailingBytesError(ProtocolError):
    """A message decoded completely but bytes were left over."""


class CorruptRecordError(ProtocolError):
    """A record batch or legacy message failed its CRC or structure checks."""


class UnsupportedVersionError(KwireError):
    """An (api, version) pair outside what kwire or the broker supports."""


class UnsupportedCompressionError(CorruptRecordError):
    """A batch names a compression codec kwire does not know."""


class DecompressionLimitError(CorruptRecordError):
    """A compressed batch expands past ``fetch.max.decompressed.bytes`` (a decompression bomb,
    or a legitimate batch bigger than the cap allows).  Decompression stopped at the cap.
    ``limit`` is the cap in bytes; ``topic``, ``partition`` and ``offset`` (the batch's base
    offset, or a legacy wrapper's offset) name the batch when known (else None)."""

    def __init__(self, message: str, *, position: int | None = None, limit: int | None = None,
                 topic: str | None = None, partition: int | None = None,
                 offset: int | None = None):
        super().__init__(message, position=position)
        self.limit = limit
        self.topic = topic
        self.partition = partition
        self.offset = offset


# --- client-side ------------------------------------------------------------------------

class ConfigError(KwireError, ValueError):
    """An unknown configuration key or an invalid value; the message names it."""


class KafkaTimeoutError(KwireError, TimeoutError):
    """An operation did not complete within its timeout."""


class KafkaConnectionError(KwireError, ConnectionError):
    """A broker connection could not be made or was lost."""


class NoOffsetForPartitionError(KwireError):
    """No committed offset and auto.offset.reset=error."""


class DataLossError(KwireError):
    """Records a read needs are gone from Kafka: below the log start (retention, DeleteRecords),
    past the log end (truncation), or in a topic that was deleted and recreated (its topic id
    changed).  Raised by the Spark source when failOnDataLoss is true."""


class ExecutorSetupError(KwireError):
    """Spark's executors cannot run kwire (not importable there, another version, or their
    Python does not start); the message says what each executor reported and how to ship
    kwire with the job."""


class LogTruncationError(KwireError):
    """The leader's log was truncated below the consumer's position (KIP-320)."""


class CommitFailedError(KwireError):
    """A commit could not be completed (e.g. the group rebalanced)."""


class NotAssignedError(CommitFailedError):
    """A group member's commit named partitions it does not own (any more): revoked, lost or
    never assigned.  Another member may be consuming them; committing would overwrite its
    progress.  ``partitions`` lists them."""

    def __init__(self, message: str, partitions=()):
        super().__init__(message)
        self.partitions = list(partitions)


class RebalanceInProgressError(CommitFailedError):
    """A group member's commit met a rebalance it cannot commit through: the member has joined
    the next generation but not yet received its assignment (the broker refuses commits then).
    Retriable: commit again after the next poll()/consume() (on_assign has run by then).
    Commits of owned partitions while the group merely prepares a cooperative rebalance go
    through without this."""

    retriable = True


class ConsumerClosedError(KwireError, RuntimeError):
    """A call on a consumer after close() (confluent-kafka raises RuntimeError there too)."""


class ConcurrentUseError(KwireError, RuntimeError):
    """poll()/consume() of one Consumer called from a second thread while the first is still in
    it.  A consumer's application side has one owner at a time (see Consumer); the second call
    raises at once instead of taking records half way through the first's."""


class PurgedError(KwireError):
    """The delivery report of a record Producer.purge() dropped: still queued (``in_flight``
    False: never sent) or sent without an answer yet (``in_flight`` True: the broker may still
    have written it)."""

    def __init__(self, message: str, *, in_flight: bool = False):
        super().__init__(message)
        self.in_flight = in_flight


class MaxPollIntervalExceededError(KwireError):
    """The application did not call poll()/consume() within max.poll.interval.ms: the member
    left the group and its partitions were lost (on_lost ran first).  Raised once from the next
    poll()/consume() (librdkafka reports ``_MAX_POLL_EXCEEDED`` the same way); calling again
    rejoins the group."""


class AuthenticationError(KwireError):
    """The broker (or the client, checking the broker) refused the connection's credentials:
    SASL failed (wrong password, unknown user, mechanism not enabled, the server's SCRAM
    signature did not verify).  Not retriable: the same credentials would fail again, so
    requests waiting for the connection fail at once instead of retrying until they time out."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate did not verify against
    ssl.ca.location, its name did not match the host we connected to, the broker refused our
    client certificate, or the peer does not speak TLS.  Not retriable, like AuthenticationError."""


# --- broker error codes -------------------------------------------------------------------

class BrokerError(KwireError):
    """A non-zero error code from a broker."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    invalid_metadata: bool = False

    def __init__(self, message: str | None = None, *, code: int | None = None):
        if code is not None:
            self.code = code
        self.broker_message = message
        text = f"[{self.code}] {self.name}"
        if message:
            text += f": {message}"
        super().__init__(text)


_BY_CODE: dict[int, type[BrokerError]] = {}


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.lower().split("_")) + "Error"


def _build_broker_errors() -> None:
    from .protocol.error_codes import ERRORS

    g = globals()
    for code, name, retriable, invalid_metadata, doc in ERRORS:
        if code == 0:
            continue
        cls_name = _camel(name)
        bases: tuple[type, ...] = (BrokerError,)
        clash = g.get(cls_name)
        if clash is not None:
            # A client-side class already has this name (UnsupportedVersionError): the broker's
            # variant subclasses it too, so one `except` catches both.
            bases = (BrokerError, clash)
            cls_name = "Broker" + cls_name
        cls = type(cls_name, bases, {
            "code": code, "name": name, "retriable": retriable,
            "invalid_metadata": invalid_metadata, "__doc__": doc, "__module__": __name__,
        })
        _BY_CODE[code] = cls
        g[cls.__name__] = cls


def for_code(code: int, message: str | None = None) -> BrokerError:
    """The exception instance for a broker error code (unknown codes stay distinguishable)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = BrokerError(message, code=code)
        err.name = f"UNKNOWN_ERROR_CODE_{code}"
        err.args = (f"[{code}] {err.name}" + (f": {message}" if message else ""),)
        return err
    return cls(message)


def error_class(code: int) -> type[BrokerError]:
    return _BY_CODE.get(code, BrokerError)


_build_broker_errors()
