"""A Kafka producer: batching per partition, compression, acks, retries, delivery reports.

    with Producer({"bootstrap.servers": "localhost:9092", "compression.type": "zstd"}) as p:
        p.produce("events", b"value", key=b"k", headers={"h": b"v"}, on_delivery=report)
        p.poll(0)        # serve delivery reports, drive I/O
        p.flush(10)      # wait until everything is acknowledged (or failed)

The API follows confluent-kafka's Producer; timeouts are in seconds.  The driver is
synchronous: ``produce`` buffers (and writes full batches without blocking), ``poll`` and
``flush`` drive the :class:`~kwire.net.NetworkClient` and call delivery callbacks — so call
``poll`` regularly, as with confluent-kafka.  Not thread-safe.

**Partitioning.**  An explicit ``partition`` wins.  Otherwise ``partitioner`` decides:

* ``murmur2_random`` (kwire's default) — the Java client's: ``(murmur2(key) & 0x7fffffff) %
  partitions``.  Keyed records land where a Java producer (or librdkafka with
  ``partitioner=murmur2_random``) puts them.  Null keys are *sticky*: one random partition until
  its batch is sent, then another (KIP-480).
* ``consistent_random`` — librdkafka's and so **confluent-kafka's default**: ``crc32(key) %
  partitions``; null and empty keys random.  Choose it to co-partition with data confluent-kafka
  produced with its defaults.
* ``fnv1a_random`` — Sarama's (Go) default: FNV-1a 32-bit, as a signed int, absolute value,
  modulo partitions.
* ``murmur2``, ``consistent``, ``fnv1a`` — the same hashes, with null keys hashed as empty keys
  (so they all go to one partition), as librdkafka does; ``random`` ignores keys.

**Delivery.**  At least once: retriable errors (leader moved, connection lost, timeouts) are
retried after ``retry.backoff.ms`` with a metadata refresh, until ``retries`` or
``delivery.timeout.ms`` runs out.  One batch per partition is in flight at a time, so retries
keep per-partition order.  Without idempotence a retry after a lost response may write a
batch twice; with ``enable.idempotence`` (off by default, as in librdkafka) every batch carries
the producer id, epoch and a per-partition sequence number, so the broker drops the duplicate
(see :mod:`kwire.producer.transactions`).  ``transactional.id`` adds transactions:
``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
``commit_transaction``, ``abort_transaction`` (confluent-kafka's API; timeouts in seconds;
:mod:`kwire.producer.txn_api`).  With ``acks=0`` no response comes back and offsets are
reported as -1001 (OFFSET_INVALID), as librdkafka does.
"""
from __future__ import annotations

import random
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from ..config import Config, parse_config
from ..errors import (
    KafkaTimeoutError,
    KwireError,
    PurgedError,
    for_code,
)
from ..net import NetworkClient, now_ms
from ..net.metadata import ClusterSnapshot
from ..stats import ProducerStats
from .batch import (
    BATCH_OVERHEAD_BYTES,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Batch,
    DeliveryReport,
)
from .coordinator import TxnCoordinatorClient
from .sender import SenderMixin
from .transactions import TransactionManager, TxnState
from .txn_api import TransactionsMixin

__all__ = ["Producer", "DeliveryReport", "murmur2", "fnv1a", "partition_for",
           "TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME"]

_ACKS = {"0": 0, "1": 1, "all": -1}
_RECORD_OVERHEAD_BYTES = 21  # worst-case varints and attributes of one v2 record
_TOPIC_PROPAGATION_MAX_MS = 30_000  # how long an unknown topic may take to appear

# what produce() takes for a key, a value or a header value (str is encoded as UTF-8)
BytesLike: TypeAlias = bytes | bytearray | memoryview | str | None
# produce()'s headers: a mapping or a sequence of (name, value) pairs
Headers: TypeAlias = Mapping[str, BytesLike] | Iterable[tuple[str, BytesLike]] | None


# --- hashing -----------------------------------------------------------------------------

def murmur2(data: bytes) -> int:
    """MurmurHash2 (32-bit, seed 0x9747b28c) as Kafka's Java client computes it, unsigned."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = (data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end4 + 2] << 16
    if rest >= 2:
        h ^= data[end4 + 1] << 8
    if rest >= 1:
        h ^= data[end4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a, unsigned."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def partition_for(partitioner: str, key: bytes | None, num_partitions: int) -> int | None:
    """The partition ``partitioner`` maps ``key`` to; None when the choice is random (null key
    with a ``*_random`` partitioner, or ``random``)."""
    if partitioner == "random" or (key is None and partitioner.endswith("_random")):
        return None
    if partitioner == "consistent_random" and not key:  # librdkafka: empty keys are random too
        return None
    data = b"" if key is None else key
    if partitioner.startswith("murmur2"):
        return (murmur2(data) & 0x7FFFFFFF) % num_partitions
    if partitioner.startswith("consistent"):
        return zlib.crc32(data) % num_partitions
    if partitioner.startswith("fnv1a"):
        h = fnv1a(data)
        if h >= 0x80000000:  # Sarama: int32, then absolute value
            h = 0x100000000 - h
        return h % num_partitions
    raise ValueError(f"unknown partitioner {partitioner!r}")


def _to_bytes(value: object, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for item in items:
        k, v = item
        if not isinstance(k, str):
            raise TypeError(f"header keys must be str, not {type(k).__name__}")
        out.append((k, _to_bytes(v, f"header {k!r}")))
    return out


class Producer(SenderMixin, TransactionsMixin):
    """Produce records to Kafka (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *,
                 tracer: Callable[[dict[str, Any]], Any] | None = None, **kwargs: Any) -> None:
        if kwargs:  # confluent-kafka allows Producer(conf, logger=...) style extras
            config = {**(config.user if isinstance(config, Config) else (config or {})), **kwargs}
        cfg = config if isinstance(config, Config) else parse_config(config or {}, role="producer")
        self.config = cfg
        auto_create = cfg.user.get("allow.auto.create.topics", True)
        self._net = NetworkClient(cfg, tracer=tracer, allow_auto_topic_creation=auto_create)
        self._md = self._net.metadata
        self._acks = _ACKS[cfg.acks]
        self._linger_ms = cfg.linger_ms
        self._batch_bytes = cfg.batch_size
        self._batch_records = cfg.batch_num_messages
        self._compression = cfg.compression_type
        self._max_message_bytes = cfg.message_max_bytes
        self._retries = cfg.retries
        self._retry_backoff_ms = cfg.retry_backoff_ms
        self._delivery_timeout_ms = cfg.delivery_timeout_ms
        self._request_timeout_ms = cfg.request_timeout_ms
        self._max_queued = cfg.queue_buffering_max_messages
        self._partitioner = cfg.partitioner
        self._default_on_delivery = cfg.on_delivery
        self._batches: dict[tuple[str, int], deque[Batch]] = {}
        self._parked: dict[str, deque[DeliveryReport]] = {}  # waiting for the topic's metadata
        self._unknown_since: dict[str, int] = {}
        self._busy: set[tuple[str, int]] = set()  # partitions with a batch in flight
        self._flying: dict[int, Batch] = {}  # id -> batch in flight (for purge())
        self._sticky: dict[str, int] = {}  # topic -> partition for null keys
        self._reports: deque[DeliveryReport] = deque()
        self._outstanding = 0
        self._rng = random.Random()
        self._closed = False
        self._stats = ProducerStats.maybe(cfg, self._net, now_ms())  # None: statistics off
        from .. import records as _records  # the record layer; imported late so a codec build
        self._build_batch = _records.build_batch  # problem surfaces only when producing
        self._tm: TransactionManager | None = None  # idempotent / transactional state
        self._txc: TxnCoordinatorClient | None = None
        if cfg.enable_idempotence:
            self._tm = TransactionManager(cfg.transactional_id, cfg.transaction_timeout_ms)
            self._txc = TxnCoordinatorClient(
                self._net, self._tm, retry_backoff_ms=cfg.retry_backoff_ms,
                request_timeout_ms=cfg.request_timeout_ms,
                pump=lambda wait_ms: self._drive(wait_ms, flushing=False, serve=False))

    # --- public API -----------------------------------------------------------------------
    def produce(self, topic: str, value: BytesLike = None, key: BytesLike = None,
                partition: int | None = None, on_delivery: Callable[..., Any] | None = None,
                timestamp: int | None = None, headers: Headers = None,
                callback: Callable[..., Any] | None = None) -> None:
        """Queue one record.  ``timestamp`` in ms (default: now); ``headers`` a dict or a list
        of ``(str, bytes | str | None)``; ``on_delivery(err, report)`` (alias ``callback``) is
        called from poll()/flush().  Raises BufferError when queue.buffering.max.messages
        records are waiting."""
        if self._closed:
            raise RuntimeError("producer is closed")
        if self._tm is not None:
            self._tm.check_produce()
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        if self._max_queued and self._outstanding >= self._max_queued:
            raise BufferError(f"local queue full: {self._outstanding} records waiting "
                              "(queue.buffering.max.messages); call poll()")
        k = _to_bytes(key, "key")
        v = _to_bytes(value, "value")
        hdrs = _headers(headers)
        size = (len(k) if k else 0) + (len(v) if v else 0) + sum(
            len(hk) + (len(hv) if hv else 0) + 10 for hk, hv in hdrs) + _RECORD_OVERHEAD_BYTES
        if size + BATCH_OVERHEAD_BYTES > self._max_message_bytes:
            raise for_code(10, f"record of about {size} bytes exceeds message.max.bytes="
                               f"{self._max_message_bytes}")
        if timestamp is None or timestamp == 0:
            timestamp = int(time.time() * 1000)
        if partition is not None and partition < 0:
            partition = None  # confluent-kafka's PARTITION_UA
        now = now_ms()
        msg = DeliveryReport(topic, partition, k, v, hdrs, int(timestamp),
                             on_delivery or callback or self._default_on_delivery, now, size)
        self._outstanding += 1
        if partition is None:
            parts = self._md.partitions_for(topic)
            if parts is None or self._parked.get(topic):
                self._md.add_topics([topic])
                self._parked.setdefault(topic, deque()).append(msg)
                return
            msg._partition = self._choose_partition(topic, k, len(parts))
        else:
            self._md.add_topics([topic])
        if self._append(msg, now):
            self._drive(0, flushing=False, serve=False)  # a batch filled up: write it now

    def poll(self, timeout: float | None = 0) -> int:
        """Drive I/O and serve delivery callbacks; wait up to ``timeout`` seconds (None:
        forever) for at least one.  Returns the number of callbacks served."""
        deadline = None if timeout is None else now_ms() + int(timeout * 1000)
        while True:
            remaining = 60_000 if deadline is None else max(0, deadline - now_ms())
            self._drive(remaining, flushing=False, serve=False)
            served = self._serve_reports()
            if served or (deadline is not None and now_ms() >= deadline):
                return served

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued, wait for the acknowledgements (or failures), serve the
        callbacks.  Returns the number of records still outstanding (0 unless it timed out)."""
        deadline = None if timeout is None else now_ms() + int(timeout * 1000)
        while True:
            self._serve_reports()
            if self._outstanding == 0:
                return 0
            now = now_ms()
            if deadline is not None and now >= deadline:
                return self._outstanding
            remaining = 1000 if deadline is None else min(1000, deadline - now)
            self._drive(remaining, flushing=True, serve=False)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Drop records before delivery: those waiting in the queue (``in_queue``) and those
        sent without an answer yet (``in_flight``; the broker may still write them, their
        answer is ignored).  Each gets a delivery report with a :class:`PurgedError`
        (``in_flight`` telling which), served by the next poll()/flush(), as confluent-kafka
        does.  ``blocking`` is accepted for confluent-kafka's signature: kwire's producer has
        no background thread, so purging is always done when purge() returns."""
        now = now_ms()
        if in_queue:
            err = PurgedError("purged from the producer queue (purge())")
            for parked in self._parked.values():
                for msg in parked:
                    self._report(msg, err, now)
            self._parked.clear()
            for q in self._batches.values():
                while q:
                    b = q.popleft()
                    if self._tm is not None and b.payload is not None:
                        self._sequence_gap()  # a retry dropped: its sequence may be missing
                    for msg in b.msgs:
                        self._report(msg, err, now)
            self._sticky.clear()
        if in_flight and self._flying:
            err = PurgedError("purged while in flight (purge())", in_flight=True)
            if self._tm is not None:
                self._sequence_gap()  # the broker may or may not write them
            for b in self._flying.values():
                b.purged = True
                for msg in b.msgs:
                    self._report(msg, err, now)
            self._flying.clear()

    def __len__(self) -> int:
        """Records not yet acknowledged or whose callbacks were not yet served."""
        return self._outstanding

    def list_topics(self, topic: str | None = None, timeout: float | None = 10.0) -> ClusterSnapshot:
        """Metadata snapshot (see :meth:`kwire.admin.Admin.list_topics`)."""
        from ..net import Metadata
        md = Metadata()
        resp = self._net.request(None, "Metadata", lambda v: md.request_body(v, None if topic is None else [topic]),
                                 None if timeout is None else int(timeout * 1000))
        md.update(resp, 0, all_topics=True)
        return md.snapshot()

    def close(self, timeout: float | None = None) -> int:
        """Flush (up to ``timeout``) and close the connections; returns records left unsent."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        self._closed = True
        self._net.close()
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def network(self) -> NetworkClient:
        return self._net

    @property
    def fatal_error(self) -> KwireError | None:
        """The :class:`~kwire.errors.ProducerFatalError` once the idempotent / transactional
        producer cannot go on (fenced, sequence state lost), else None."""
        tm = self._tm
        if tm is None or tm.state is not TxnState.FATAL_ERROR:
            return None
        return tm.set_fatal(KwireError())

    # --- partitioning and batching ---------------------------------------------------------
    def _choose_partition(self, topic: str, key: bytes | None, n: int) -> int:
        p = partition_for(self._partitioner, key, n)
        if p is not None:
            return p
        if key is None and self._partitioner == "murmur2_random":
            sticky = self._sticky.get(topic)
            if sticky is None or sticky >= n:
                sticky = self._sticky[topic] = self._rng.randrange(n)
            return sticky
        return self._rng.randrange(n)

    def _append(self, msg: DeliveryReport, now: int) -> bool:
        """Add to its partition's open batch; True when a batch was closed (is full)."""
        assert msg._partition is not None  # (partitioned before it is queued)
        tp = (msg._topic, msg._partition)
        q = self._batches.get(tp)
        if q is None:
            q = self._batches[tp] = deque()
        b = q[-1] if q and not q[-1].closed else None
        closed = False
        if b is not None and b.msgs and (b.size_bytes + msg._size > self._batch_bytes or
                                         len(b.msgs) >= self._batch_records):
            self._close_batch(b)
            closed = True
            b = None
        if b is None:
            b = Batch(tp, now)
            q.append(b)
        b.msgs.append(msg)
        b.size_bytes += msg._size
        return closed

    def _close_batch(self, b: Batch) -> None:
        b.closed = True
        if self._sticky.get(b.tp[0]) == b.tp[1]:
            del self._sticky[b.tp[0]]  # the next null-key record picks a new partition

    # --- the driver -------------------------------------------------------------------------
    def _drive(self, wait_ms: int, *, flushing: bool, serve: bool) -> None:
        now = now_ms()
        tm = self._tm
        if tm is not None and tm.state is TxnState.FATAL_ERROR:
            self._fail_waiting(tm.set_fatal(KwireError()), now)
        elif tm is not None and tm.state is TxnState.ABORTABLE_ERROR and tm.pending:
            self._fail_unadded(tm, now)
        self._place_parked(now)
        self._expire(now)
        self._send_ready(now, flushing)
        wait = min(wait_ms, self._next_wake_ms(now, flushing) - now)
        self._net.poll(max(0, wait))
        now = now_ms()
        self._place_parked(now)
        self._send_ready(now, flushing)
        if serve:
            self._serve_reports()

    def _next_wake_ms(self, now: int, flushing: bool) -> int:
        t = now + 1000 if self._stats is None else min(now + 1000, self._stats.next_ms)
        tm = self._tm
        if tm is not None:
            assert self._txc is not None
            need_pid = not tm.transactional and not tm.has_identity and self._batches_waiting()
            t = min(t, self._txc.next_wake_ms(now, need_pid))
        for tp, q in self._batches.items():
            if tm is not None and tm.blocked(tp):
                continue  # waits for a producer id or AddPartitionsToTxn: their answers wake us
            if q and tp not in self._busy:
                b = q[0]
                if b.attempts and 0 <= b.stale_metadata_ms >= self._md.updated_ms:
                    t = min(t, now + self._retry_backoff_ms)  # the refresh's answer wakes us first
                elif b.attempts:
                    t = min(t, b.next_attempt_ms)
                elif not flushing:
                    t = min(t, b.created_ms + self._linger_ms)
                else:
                    t = min(t, now + self._retry_backoff_ms)  # waiting for a leader
        return max(now, t)

    def _place_parked(self, now: int) -> None:
        for topic in list(self._parked):
            q = self._parked[topic]
            parts = self._md.partitions_for(topic)
            if parts is None:
                info = self._md.topic(topic)
                if info is not None and info.error_code:
                    err = for_code(info.error_code, f"topic {topic!r}")
                    first = self._unknown_since.setdefault(topic, now)
                    if not err.retriable or now - first >= _TOPIC_PROPAGATION_MAX_MS:
                        del self._parked[topic]
                        for msg in q:
                            self._report(msg, err, now)
                        continue
                    self._md.request_update()
                continue
            self._unknown_since.pop(topic, None)
            del self._parked[topic]
            n = len(parts)
            for msg in q:
                msg._partition = self._choose_partition(topic, msg._key, n)
                self._append(msg, now)

    def _expire(self, now: int) -> None:
        auth = self._net.authentication_error
        if auth is not None:
            # Wrong credentials or an untrusted broker: retrying cannot help, so every record
            # waiting for metadata or a leader fails now, not at delivery.timeout.ms.
            self._fail_waiting(auth, now)
            return
        limit = self._delivery_timeout_ms
        for topic in list(self._parked):
            parked = self._parked[topic]
            while parked and now - parked[0]._created_ms >= limit:
                self._report(parked.popleft(), KafkaTimeoutError(
                    f"record for {topic!r} timed out after {limit} ms waiting for metadata "
                    "(delivery.timeout.ms)"), now)
            if not parked:
                del self._parked[topic]
        for tp, q in self._batches.items():
            if tp in self._busy:
                continue
            while q and now - q[0].msgs[0]._created_ms >= limit:
                b = q.popleft()
                err = KafkaTimeoutError(f"batch for {tp[0]}[{tp[1]}] timed out after {limit} ms "
                                        "(delivery.timeout.ms)")
                if self._tm is not None and b.payload is not None:
                    self._sequence_gap()
                for msg in b.msgs:
                    self._report(msg, err, now)

    def _fail_unadded(self, tm: TransactionManager, now: int) -> None:
        """The transaction failed: batches still waiting for AddPartitionsToTxn fail with its
        error (else commit_transaction's flush would wait for them in vain)."""
        err = tm.error if tm.error is not None else KwireError("transaction failed")
        for tp in list(tm.pending):
            q = self._batches.get(tp)
            while q:
                for msg in q.popleft().msgs:
                    self._report(msg, err, now)
        tm.pending.clear()

    def _fail_waiting(self, error: KwireError, now: int) -> None:
        for parked in list(self._parked.values()):
            for msg in parked:
                self._report(msg, error, now)
        self._parked.clear()
        for tp, q in self._batches.items():
            if tp in self._busy:
                continue
            while q:
                for msg in q.popleft().msgs:
                    self._report(msg, error, now)
