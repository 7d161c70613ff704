"""confluent-kafka's Producer over :class:`kwire.Producer`."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..consumer.types import GroupMetadata
from ..errors import ConfigError, KafkaTimeoutError, KwireError, TransactionAbortRequiredError
from ..net.connection import ConnState
from ..producer import Producer as _KProducer
from ._config import config_error, forward_logs, split_config
from ._types import KafkaError, KafkaException, _from_report, to_kafka_error, to_kafka_exception

if TYPE_CHECKING:
    from .admin import ClusterMetadata  # (imported when called: it pulls in the admin client)

log = logging.getLogger("kwire.confluent")

_T = TypeVar("_T")
_POLL_SLICE_S = 0.5  # poll(-1) / flush(-1) wait in slices so error_cb and stats_cb keep running


def _ck_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError("timeout must be a number")
    return None if timeout < 0 else float(timeout)


def _report_cb(cb: Callable[[KafkaError | None, Any], object]) -> Callable[[BaseException | None, Any], None]:
    """kwire calls ``cb(kwire_error, DeliveryReport)``; confluent-kafka's callbacks take
    ``(KafkaError | None, Message)``."""
    def deliver(err: BaseException | None, rep: Any) -> None:
        if err is None:
            e = None
        elif isinstance(err, KafkaTimeoutError):  # delivery.timeout.ms (message.timeout.ms)
            e = KafkaError(KafkaError._MSG_TIMED_OUT, f"Local: Message timed out ({err})")
        else:
            e = to_kafka_error(err)
        cb(e, _from_report(rep, e))
    return deliver


def _check_headers(headers: object) -> list[tuple[str, str | bytes | None]]:
    """confluent-kafka's header forms: a list of (str, value) pairs or a dict; values str,
    bytes or None.  Anything else is a TypeError."""
    items = list(headers.items()) if isinstance(headers, dict) else headers
    if not isinstance(items, list):
        raise TypeError("headers must be a list of (key, value) tuples or a dict")
    for h in items:
        if not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str):
            raise TypeError("headers must be a list of (str key, value) tuples or a dict")
        if h[1] is not None and not isinstance(h[1], (str, bytes)):
            raise TypeError(f"header {h[0]!r}: value must be str, bytes or None, "
                            f"not {type(h[1]).__name__}")
    return items


class Producer:
    """confluent-kafka's ``Producer(conf)`` over kwire.  ``produce()`` buffers; ``poll()`` and
    ``flush()`` send and serve delivery callbacks (``on_delivery(err, msg)``), error_cb and
    stats_cb.  ``poll(-1)`` / ``flush()`` / ``flush(-1)`` wait without a limit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > 1:
            raise TypeError("expected configuration dict")
        kconf, extra = split_config(args[0] if args else None, kwargs, "producer")
        # librdkafka's default partitioner (kwire's own is Java's murmur2_random): keys land
        # where confluent-kafka puts them
        kconf.setdefault("partitioner", "consistent_random")
        dr = extra.get("on_delivery") or extra.get("dr_cb") or extra.get("dr_msg_cb")
        if dr is not None:
            kconf["on_delivery"] = _report_cb(dr)
        self._error_cb = extra.get("error_cb")
        self._no_brokers = extra.get("_no_brokers", False)
        kconf.pop("logger", None)
        self._logger = extra.get("logger")
        try:
            self._p = _KProducer(kconf)
        except ConfigError as exc:
            raise config_error(exc) from None
        self._closed = False
        self._all_down = False
        self._auth_reported: BaseException | None = None
        self._fatal_reported = False
        self._callbacks: dict[Callable[..., object], Callable[[BaseException | None, Any], None]] = {}  # user callback -> its wrapper (most programs pass one)
        if self._error_cb is not None:
            # librdkafka connects to the bootstrap brokers at once; ask for metadata so that
            # an unreachable cluster is noticed (and reported) without records to send.
            self._p._md.request_update()
        if self._logger is not None:
            self._log_handler = forward_logs(self._logger, extra.get("log_level"))

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Callable[..., object] | None = None, timestamp: int = 0,
                headers: Any = None, callback: Callable[..., object] | None = None) -> None:
        """Queue one message; raises BufferError when the queue is full."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        cb = on_delivery or callback
        if cb is not None:
            w = self._callbacks.get(cb)
            if w is None:
                if not callable(cb):
                    raise TypeError("on_delivery expects a callable")
                w = _report_cb(cb)
                if len(self._callbacks) < 1000:  # a lambda per call is not worth keeping
                    self._callbacks[cb] = w
            cb = w
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"'{type(partition).__name__}' object cannot be interpreted as an integer")
        if headers is not None:
            headers = _check_headers(headers)
        try:
            self._p.produce(topic, value, key, partition, cb, timestamp or None, headers)
        except BufferError:
            raise BufferError(KafkaError(KafkaError._QUEUE_FULL)) from None
        except TransactionAbortRequiredError as exc:
            # librdkafka refuses a message for a failed transaction with _STATE (the flags
            # come with commit_transaction's error)
            raise KafkaException(KafkaError(KafkaError._STATE, str(exc))) from None
        except KwireError as exc:
            raise KafkaException(to_kafka_error(exc)) from None

    def poll(self, timeout: float | None = None) -> int:
        """Send, receive, serve callbacks; wait up to ``timeout`` seconds (None / -1: until a
        callback was served).  Returns the number of delivery callbacks served."""
        return self._wait(timeout, self._p.poll, lambda served: served > 0)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every message is delivered or failed (None / -1: no limit).  Returns the
        number still in the queue."""
        return self._wait(timeout, self._p.flush, lambda left: left == 0)

    def _wait(self, timeout: float | None, step: Callable[[float], int],
              done: Callable[[int], bool]) -> int:
        """``step`` (the kwire Producer's poll or flush) a slice at a time, serving callbacks
        after each, until ``done`` with what it returned or ``timeout`` passed; its last result."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        t = _ck_timeout(timeout)
        deadline = None if t is None else time.monotonic() + t
        while True:
            left = _POLL_SLICE_S if deadline is None else max(0.0, min(_POLL_SLICE_S, deadline - time.monotonic()))
            n = step(left)
            self._events()
            if done(n) or (deadline is not None and time.monotonic() >= deadline):
                return n

    def _events(self) -> None:
        net = self._p._net
        conns = list(net._conns.values())
        down = bool(conns) and all(c.state is ConnState.DISCONNECTED and c.failures > 0 for c in conns)
        if down and not self._all_down and not self._no_brokers:
            self._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN,
                                      f"{len(conns)}/{len(conns)} brokers are down"))
        self._all_down = down
        auth = net.authentication_error
        if auth is not None and auth is not self._auth_reported:
            self._auth_reported = auth
            self._on_error(auth)
        fatal = self._p.fatal_error
        if fatal is not None and not self._fatal_reported:
            # As librdkafka: an idempotent producer's fatal error reaches error_cb once, as
            # _FATAL; a transactional producer's is raised by its calls only (confluent-kafka
            # 2.16 calls no error_cb when fenced: compared in tests/test_kafka_txn_producer.py).
            self._fatal_reported = True
            if not self._p.config.transactional_id:
                self._on_error(KafkaError(KafkaError._FATAL, str(fatal), fatal=True))

    def _on_error(self, exc: BaseException) -> None:
        err = to_kafka_error(exc)
        if self._error_cb is not None:
            self._error_cb(err)
        else:
            log.warning("producer error: %s", err)

    def __len__(self) -> int:
        return len(self._p)

    def __bool__(self) -> bool:  # a Producer is a Producer, whether or not messages are queued
        return True

    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> ClusterMetadata:
        if self._closed:
            raise RuntimeError("Producer has been closed")
        from .admin import _cluster_metadata
        try:
            return _cluster_metadata(self._p.list_topics(topic, _ck_timeout(timeout)))
        except KwireError as exc:
            raise KafkaException(to_kafka_error(exc)) from None

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Drop queued (``in_queue``) and in-flight (``in_flight``) messages; their delivery
        callbacks get ``_PURGE_QUEUE`` / ``_PURGE_INFLIGHT`` from the next poll()/flush()."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        self._p.purge(bool(in_queue), bool(in_flight), bool(blocking))

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], partition: int = -1,
                      callback: Callable[..., object] | None = None,
                      on_delivery: Callable[..., object] | None = None) -> int:
        """Queue a list of message dicts (``value``, ``key``, ``callback``/``on_delivery``) to
        ``partition`` (default: the partitioner's choice); as in confluent-kafka, a message's
        ``partition`` and headers are ignored and a ``timestamp`` raises NotImplementedError.  Returns how many were queued; a message that could not be gets an
        ``_error`` entry (a KafkaError) in its dict."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        if not isinstance(messages, list):
            raise TypeError("messages must be a list")
        default_cb = on_delivery or callback
        for i, m in enumerate(messages):  # checked first: a bad message queues none
            if not isinstance(m, dict):
                raise TypeError(f"Message at index {i} must be a dict")
            for what in ("value", "key"):
                if m.get(what) is not None and not isinstance(m[what], (bytes, str)):
                    raise TypeError(f"Message {what} at index {i} must be bytes or str")
            if "partition" in m and (isinstance(m["partition"], bool) or not isinstance(m["partition"], int)):
                raise TypeError(f"Message partition at index {i} must be int")
            if "timestamp" in m:
                raise NotImplementedError("Message timestamps are not currently supported in batch mode")
        queued = 0
        # As confluent-kafka 2.16 does (its docstring says otherwise): a message's own
        # "partition" is checked but not used -- the batch's ``partition`` applies to all, or
        # the partitioner; headers are ignored.
        for m in messages:
            try:
                self.produce(topic, m.get("value"), m.get("key"), partition,
                             m.get("callback") or m.get("on_delivery") or default_cb)
            except BufferError as exc:
                m["_error"] = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) \
                    else KafkaError(KafkaError._QUEUE_FULL)
                continue
            except KafkaException as exc:
                m["_error"] = exc.args[0]
                continue
            queued += 1
        return queued

    # --- transactions (kwire.producer.txn_api; errors as KafkaException(KafkaError)) -----------
    def _txn_call(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise RuntimeError("Producer has been closed")
        try:
            return fn(*args)
        except KwireError as exc:
            raise to_kafka_exception(exc) from None

    def init_transactions(self, timeout: float | None = None) -> None:
        """Take the transactional id's producer id (fencing older producers with it)."""
        return self._txn_call(self._p.init_transactions, _txn_timeout(timeout))

    def begin_transaction(self) -> None:
        return self._txn_call(self._p.begin_transaction)

    def send_offsets_to_transaction(self, positions: list[Any], group_metadata: GroupMetadata,
                                    timeout: float | None = None) -> None:
        """Commit the consumer group's ``positions`` (TopicPartitions) with the transaction."""
        return self._txn_call(self._p.send_offsets_to_transaction, positions, group_metadata,
                              _txn_timeout(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit the transaction."""
        return self._txn_call(self._p.commit_transaction, _txn_timeout(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        return self._txn_call(self._p.abort_transaction, _txn_timeout(timeout))

    def cluster_id(self, timeout: float | None = -1) -> str | None:
        """The cluster id the brokers report (None when they report none)."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        cid: str | None = self._p._net.metadata.cluster_id
        if cid is None:
            try:
                cid = self._p.list_topics(None, _ck_timeout(timeout)).cluster_id
            except KwireError as exc:
                raise to_kafka_exception(exc) from None
        return cid

    def set_sasl_credentials(self, username: str, password: str) -> None:
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                        "kwire takes SASL credentials from the configuration only"))

    def close(self, timeout: float | None = None) -> bool:
        """Flush (up to ``timeout``, default without limit) and close.  Returns True."""
        if self._closed:
            return True
        self.flush(timeout)
        self._closed = True
        self._p.close(0)
        if self._logger is not None:
            logging.getLogger("kwire").removeHandler(self._log_handler)
        return True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False


def _txn_timeout(timeout: float | None) -> float | None:
    """confluent-kafka: None or -1 wait up to transaction.timeout.ms (kwire: None)."""
    if timeout is None or timeout < 0:
        return None
    return float(timeout)
