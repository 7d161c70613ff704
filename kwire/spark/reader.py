"""Executor side of the Spark source: read exact offset ranges, without a consumer group.

One range ``[from, until)`` of one partition is read with a small Fetch loop over a
:class:`~kwire.net.NetworkClient` taken from a per-process cache (Python workers are reused
between tasks, so later tasks skip the connect and ApiVersions handshake)::

    pos = from
    while pos < until:
        Fetch(partition leader, fetch_offset=pos)           the next one is sent before this
        scan the entry headers (records.scan_spans)         one is decoded (pipelining)
        pos = last offset of the last complete batch + 1    so gaps (compaction, transaction
        decode the user batches, keep offsets in [from, until)   markers, aborted records) end
                                                            the range at `until`, never hang

read_committed leaves out aborted transactions' batches with the record layer's filter
(``kwire.records.aborted_spans`` / ``record_runs``), the one the consumer uses.

Errors: OFFSET_OUT_OF_RANGE and a log that ends or starts past the range are data loss (fail,
or skip with a warning when failOnDataLoss=false); leader and metadata errors refresh the
metadata and retry; nothing arriving for ``kafkaConsumer.pollTimeoutMs`` is a timeout.

Two outputs from the same loop:

* :func:`read_range_arrow` -- ``pyarrow.RecordBatch`` es decoded straight from the record
  batches into columns (``decode_columns``; no per-record Python object), for the Data Source
  and ``mapInArrow``;
* :func:`read_range_rows` -- :class:`KafkaRow` tuples, for RDD users.
"""
from __future__ import annotations

import atexit
import logging
import time
import uuid
from collections import namedtuple
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from .. import records as _records
from ..config import Config, parse_config
from ..errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    KwireError,
    ProtocolError,
    error_class,
    for_code,
)
from ..net import NetworkClient, now_ms
from .options import SourceOptions
from .planner import DataLossError, OffsetRange

if TYPE_CHECKING:
    from ..net.connection import InFlight

__all__ = ["ReadSettings", "KafkaRow", "KafkaRowWithHeaders", "read_range_rows", "read_range_arrow",
           "fetch_chunks", "close_cached_clients"]

_log = logging.getLogger("kwire.spark")

_OFFSET_OUT_OF_RANGE = 1
_MAX_PARTITION_FETCH_BYTES = 256 * 1024 * 1024  # how far a too-small fetch size is grown
_IDLE_CLOSE_S = 300.0  # cached connections unused this long are closed

KafkaRow = namedtuple("KafkaRow", "key value topic partition offset timestamp timestampType")
KafkaRowWithHeaders = namedtuple("KafkaRowWithHeaders",
                                 "key value topic partition offset timestamp timestampType headers")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class ReadSettings:
    """What an executor needs to read a range (picklable)."""

    kafka: Mapping[str, Any]
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    # commitToGroup: a PySpark accumulator each finished range is reported to, as
    # (topic, partition, from, until, records, fingerprint) -- see kwire.spark.commit
    progress: Any = None

    @classmethod
    def from_options(cls, o: SourceOptions) -> ReadSettings:
        return cls(dict(o.kafka), o.include_headers, o.fail_on_data_loss, o.poll_timeout_ms)

    def config(self) -> Config:
        return parse_config(dict(self.kafka), role="consumer")


# --- the per-process connection cache ----------------------------------------------------------

_Key = tuple[tuple[str, str], ...]  # a kafka configuration, hashable
_idle: dict[_Key, list[tuple[NetworkClient, float]]] = {}


def _cache_key(kafka: Mapping[str, Any]) -> _Key:
    return tuple(sorted((k, repr(v)) for k, v in kafka.items()))


def _acquire(settings: ReadSettings) -> tuple[_Key, NetworkClient]:
    key = _cache_key(settings.kafka)
    now = time.monotonic()
    for k, entries in list(_idle.items()):  # close what nobody used for a while
        keep = []
        for client, last in entries:
            if now - last > _IDLE_CLOSE_S:
                client.close()
            else:
                keep.append((client, last))
        _idle[k] = keep
    idle = _idle.get(key)
    if idle:
        return key, idle.pop()[0]
    return key, NetworkClient(settings.config())


def _release(key: _Key, client: NetworkClient, *, healthy: bool) -> None:
    if not healthy:
        client.close()
        return
    try:
        client.poll(0)  # drop finished requests nobody waits for (a fetch ahead of a stop)
    except KwireError:
        client.close()
        return
    client.release_buffers()  # do not keep up to 32 MiB per broker while waiting for a task
    _idle.setdefault(key, []).append((client, time.monotonic()))


def close_cached_clients() -> None:
    """Close every cached connection of this process (also run at exit)."""
    for entries in _idle.values():
        for client, _ in entries:
            try:
                client.close()
            except Exception:
                pass
    _idle.clear()


atexit.register(close_cached_clients)


# --- the fetch loop --------------------------------------------------------------------------------

@dataclass
class Chunk:
    """Part of a range's data: ``data[a:b]`` for each ``(a, b)`` in ``runs`` holds user records,
    of which those with offsets in ``[lo, until)`` belong to the range."""

    data: Any
    runs: list[tuple[int, int]]
    lo: int
    until: int
    leader_epoch: int


class _Retry(Exception):
    """Internal: this attempt failed in a way worth retrying after a pause."""


# What a read task asks each Fetch for when kafka.max.partition.fetch.bytes is not given: with
# Java's 1 MiB the task mostly waits on the broker's turnaround (one partition of 1M records x
# 100 B on Kafka 4.3 read in 0.149 s at 1 MiB, 0.110 s at 4 MiB, 0.096-0.100 s at 8-12 MiB,
# medians of 9).  A task holds at most two answers: the one decoded, the next on the wire.
READ_FETCH_BYTES = 4 << 20


class _Fetcher:
    def __init__(self, client: NetworkClient, cfg: Config, settings: ReadSettings, topic: str, partition: int,
                 topic_id: uuid.UUID | None = None) -> None:
        self.expected_id = topic_id  # the topic's id when the range was planned (None: unchecked)
        self.client = client
        self.cfg = cfg
        self.settings = settings
        self.topic = topic
        self.partition = partition
        self.isolation = 1 if cfg.isolation_level == "read_committed" else 0
        self.partition_max_bytes = (cfg.max_partition_fetch_bytes if "max.partition.fetch.bytes" in cfg.user
                                    else READ_FETCH_BYTES)
        self.where = f"{topic}-{partition}"
        client.metadata.add_topics([topic])

    def leader(self) -> int:
        md = self.client.metadata
        leader = md.leader_for(self.topic, self.partition)
        if leader is None:
            self.client.refresh_metadata([self.topic])
            leader = md.leader_for(self.topic, self.partition)
            if leader is None:
                t = md.topic(self.topic)
                if t is not None and t.error_code == 3 or (t is not None and self.partition not in t.partitions):
                    raise for_code(3, f"{self.where} does not exist")
                raise for_code(5, f"no leader for {self.where}")
        return leader

    def send(self, pos: int) -> tuple[InFlight, int]:
        client = self.client
        md = client.metadata
        leader = self.leader()
        part = md.partition(self.topic, self.partition)
        epoch = part.leader_epoch if part is not None else -1
        tid = md.topic_id(self.topic)
        version = None
        if tid is None:  # no topic id known: stay below Fetch v13, which names topics by id
            version = min(12, client.api_version(leader, "Fetch"))
        cfg = self.cfg
        body: dict[str, Any] = {
            "replica_id": -1, "max_wait_ms": cfg.fetch_wait_max_ms, "min_bytes": 1,
            "max_bytes": max(cfg.fetch_max_bytes, self.partition_max_bytes),
            "isolation_level": self.isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": self.topic, "topic_id": tid, "partitions": [{
                "partition": self.partition, "current_leader_epoch": epoch, "fetch_offset": pos,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": self.partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": cfg.client_rack or "",
        }
        if tid is None:
            body["topics"][0].pop("topic_id")
        return client.send(leader, "Fetch", body, version=version,
                           timeout_ms=cfg.request_timeout_ms + cfg.fetch_wait_max_ms), epoch

    def answer(self, f: InFlight) -> dict[str, Any]:
        """Our partition's data from a completed Fetch (errors raised)."""
        self.client.wait(f)
        if f.error is not None:
            if isinstance(f.error, (KafkaConnectionError, KafkaTimeoutError)):
                raise _Retry(str(f.error))
            raise f.error
        resp = f.response
        assert resp is not None  # (a Fetch done without an error has its answer)
        if resp.get("error_code"):
            err = for_code(resp["error_code"], f"Fetch for {self.where}")
            if err.retriable or err.invalid_metadata:
                raise _Retry(str(err))
            raise err
        for t in resp["responses"]:
            parts: list[dict[str, Any]] = t["partitions"]
            for p in parts:
                if p["partition_index"] == self.partition:
                    return p
        raise _Retry(f"the Fetch answer left out {self.where}")

    def same_topic(self) -> bool:
        """False when the topic is not the one the range was planned on: it was deleted and
        recreated (its id changed), which is data loss -- raised, or warned about and the range
        skipped (failOnDataLoss=false).  A stale cached id is refreshed before deciding."""
        if self.expected_id is None:
            return True
        md = self.client.metadata
        now = md.topic_id(self.topic)
        if now != self.expected_id:
            self.client.refresh_metadata([self.topic])
            now = md.topic_id(self.topic)
        if now is None or now == self.expected_id:  # gone altogether: Fetch reports it
            return True
        self.lost(f"{self.where}: the topic was deleted and recreated since the range was planned "
                  f"(topic id {self.expected_id} is now {now}), so the planned offsets are not its records")
        return False

    def lost(self, message: str) -> None:
        if self.settings.fail_on_data_loss:
            raise DataLossError(message + ". Some data may have been lost because it is not available "
                                "in Kafka any more (retention, DeleteRecords, or the topic was "
                                "recreated).  Set failOnDataLoss=false to skip it and go on.")
        _log.warning("%s; skipped (failOnDataLoss=false)", message)

    def out_of_range(self, pos: int, until: int) -> int:
        """Where to go on after OFFSET_OUT_OF_RANGE at ``pos`` (``until``: stop)."""
        from ..admin import EARLIEST, LATEST, Admin  # (a rare path: not imported by every task)

        admin = Admin(self.cfg, network=self.client)
        tp = (self.topic, self.partition)

        def one(spec: int) -> int:
            listed = admin.list_offsets(
                {tp: spec}, self.cfg.request_timeout_ms / 1000, raise_on_error=False,
                isolation_level="read_committed" if self.isolation else "read_uncommitted")[tp]
            if isinstance(listed, BaseException):
                raise _Retry(f"ListOffsets for {self.where}: {listed}")
            return listed.offset

        earliest, latest = one(EARLIEST), one(LATEST)
        if pos < earliest:
            self.lost(f"{self.where}: offsets {pos}..{min(earliest, until) - 1} are gone; the log "
                      f"starts at {earliest} now")
            return min(earliest, until)
        if pos >= latest:
            self.lost(f"{self.where}: offsets {pos}..{until - 1} are gone; the log ends at {latest} now")
            return until
        return pos  # the log moved under us; try again


def fetch_chunks(client: NetworkClient, settings: ReadSettings, topic: str, partition: int,
                 from_offset: int, until_offset: int, cfg: Config | None = None, *,
                 topic_id: uuid.UUID | None = None) -> Iterator[Chunk]:
    """The data of ``[from_offset, until_offset)`` of one partition, as :class:`Chunk` s.

    ``topic_id``: the topic's id when the range was planned; another id now is data loss."""
    cfg = cfg or settings.config()
    fx = _Fetcher(client, cfg, settings, topic, partition, topic_id)
    pos = from_offset
    until = until_offset
    poll_timeout_ms = settings.poll_timeout_ms
    deadline = now_ms() + poll_timeout_ms
    backoff_ms = cfg.retry_backoff_ms
    inflight = None  # (InFlight, epoch) fetching `pos`
    last_problem = ""
    while pos < until:
        try:
            if inflight is None:
                if not fx.same_topic():
                    return
                inflight = fx.send(pos)
            f, epoch = inflight
            inflight = None
            pd = fx.answer(f)
            code = pd["error_code"]
            if code == _OFFSET_OUT_OF_RANGE:
                pos = fx.out_of_range(pos, until)
                continue
            if code:
                cls = error_class(code)
                if cls.retriable or cls.invalid_metadata:
                    raise _Retry(str(for_code(code, f"Fetch for {fx.where} at offset {pos}")))
                raise for_code(code, f"Fetch for {fx.where} at offset {pos}")
            data = pd.get("records") or b""
            spans = _records.scan_spans(data)
            if not spans:
                if len(data):  # one batch larger than the partition fetch size: ask for more
                    if fx.partition_max_bytes >= _MAX_PARTITION_FETCH_BYTES:
                        raise ProtocolError(f"{fx.where}: the batch at offset {pos} does not fit "
                                            f"in {fx.partition_max_bytes} bytes")
                    fx.partition_max_bytes *= 2
                    continue
                log_start = pd.get("log_start_offset", -1)
                hw = pd["high_watermark"]
                if log_start is not None and log_start > pos:
                    fx.lost(f"{fx.where}: offsets {pos}..{min(log_start, until) - 1} are gone; the "
                            f"log starts at {log_start} now")
                    pos = min(log_start, until)
                    continue
                if 0 <= hw <= pos:
                    fx.lost(f"{fx.where}: offsets {pos}..{until - 1} were planned but the log ends "
                            f"at {hw} now")
                    return
                # The records exist but none came (e.g. an open transaction holds the last stable
                # offset back under read_committed): the broker already waited fetch.wait.max.ms.
                last_problem = (f"no records at offset {pos} (high watermark {hw}, last stable "
                                f"offset {pd.get('last_stable_offset')})")
                if now_ms() >= deadline:
                    raise KafkaTimeoutError(f"{fx.where}: {last_problem} within "
                                            f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}")
                continue
            nxt = spans[-1].last_offset + 1
            if nxt <= pos:
                raise ProtocolError(f"{fx.where}: Fetch at offset {pos} returned batches ending at "
                                    f"{nxt - 1}")
            skip = _records.aborted_spans(spans, pd.get("aborted_transactions")) if fx.isolation else ()
            runs = _records.record_runs(spans, skip, pos, until)
            lo = pos
            pos = nxt
            deadline = now_ms() + poll_timeout_ms
            if pos < until:
                inflight = fx.send(pos)  # on the wire while this chunk is decoded
            if runs:
                yield Chunk(memoryview(data), runs, lo, until, epoch)
            continue
        except _Retry as exc:
            last_problem = str(exc)
        except KwireError as exc:
            if not (getattr(exc, "retriable", False) or getattr(exc, "invalid_metadata", False)):
                raise
            last_problem = str(exc)
        # a retriable failure: back off, refresh metadata, try again until the deadline
        inflight = None
        if now_ms() >= deadline:
            raise KafkaTimeoutError(f"{fx.where}: cannot read offset {pos} within "
                                    f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}: {last_problem}")
        _log.debug("%s: %s; retrying", fx.where, last_problem)
        time.sleep(backoff_ms / 1000)
        backoff_ms = min(backoff_ms * 2, 1000)
        client.metadata.request_update()
        try:
            client.refresh_metadata([topic])
        except KwireError:
            pass


# --- outputs ---------------------------------------------------------------------------------------

class _Lease:
    """A cached client for the duration of one range."""

    def __init__(self, settings: ReadSettings) -> None:
        self.key, self.client = _acquire(settings)
        self.held = True

    def done(self, healthy: bool) -> None:
        if self.held:
            _release(self.key, self.client, healthy=healthy)
            self.held = False


def _as_range(r: OffsetRange | Sequence[Any]) -> OffsetRange:
    """An :class:`OffsetRange` from itself or ``(topic, partition, from, until[, topic_id])``."""
    if isinstance(r, OffsetRange):
        return r
    t, p, a, b = r[:4]
    tid = r[4] if len(r) > 4 else None
    if tid is not None and not isinstance(tid, uuid.UUID):
        tid = uuid.UUID(str(tid))
    return OffsetRange(t, int(p), int(a), int(b), topic_id=tid)


_FINGERPRINT_SHIFT = 40  # kwire.spark.commit.FINGERPRINT_SHIFT (not imported: no pyspark here)


def _reported_rows(settings: ReadSettings, r: OffsetRange, rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    n = fp = 0
    mask = r.partition << _FINGERPRINT_SHIFT
    for row in rows:
        n += 1
        fp ^= row[4] ^ mask
        yield row
    # reached only when the consumer asked for the row after the last: the range was read in full
    settings.progress.add(frozenset([(r.topic, r.partition, r.from_offset, r.until_offset, n, fp)]))


def _reported_batches(settings: ReadSettings, r: OffsetRange, batches: Iterator[Any]) -> Iterator[Any]:
    import numpy as np

    n = fp = 0
    mask = r.partition << _FINGERPRINT_SHIFT
    for batch in batches:
        rows = batch.num_rows
        n += rows
        fp ^= int(np.bitwise_xor.reduce(batch.column(4).to_numpy())) ^ (mask if rows % 2 else 0)
        yield batch
    settings.progress.add(frozenset([(r.topic, r.partition, r.from_offset, r.until_offset, n, fp)]))


def read_range_rows(settings: ReadSettings, offset_range: OffsetRange | Sequence[Any]
                    ) -> Iterator[tuple[Any, ...]]:
    """The records of one range as :class:`KafkaRow` (or :class:`KafkaRowWithHeaders`) tuples:
    ``key`` bytes | None, ``value`` bytes | None, ``topic``, ``partition``, ``offset``,
    ``timestamp`` (UTC datetime), ``timestampType`` (0 create, 1 log append, -1 none), and
    ``headers`` [(str, bytes | None)] with ``include_headers``.

    With ``settings.progress``, a range read to its end is reported to that accumulator."""
    r = _as_range(offset_range)
    rows = _read_rows(settings, r)
    return rows if settings.progress is None else _reported_rows(settings, r, rows)


def _read_rows(settings: ReadSettings, r: OffsetRange) -> Iterator[tuple[Any, ...]]:
    if r.size == 0:
        return
    cfg = settings.config()
    check_crc = cfg.check_crcs
    topic, partition = r.topic, r.partition
    headers = settings.include_headers
    new = tuple.__new__
    cls = KafkaRowWithHeaders if headers else KafkaRow
    epoch, ms = _EPOCH, timedelta(milliseconds=1)
    lease = _Lease(settings)
    ok = False
    try:
        for chunk in fetch_chunks(lease.client, settings, topic, partition, r.from_offset, r.until_offset, cfg,
                                  topic_id=r.topic_id):
            lo, until = chunk.lo, chunk.until
            for rec in _records.iter_records(chunk.data, check_crc, ranges=chunk.runs):
                o = rec.offset
                if o < lo:
                    continue
                if o >= until:
                    break
                ts = epoch + rec.timestamp * ms
                if headers:
                    yield new(cls, (rec.key, rec.value, topic, partition, o, ts, rec.timestamp_type,
                                    list(rec.headers)))
                else:
                    yield new(cls, (rec.key, rec.value, topic, partition, o, ts, rec.timestamp_type))
        ok = True
    finally:
        lease.done(ok)


def read_range_arrow(settings: ReadSettings, offset_range: OffsetRange | Sequence[Any],
                     schema: Any = None) -> Iterator[Any]:
    """The records of one range as ``pyarrow.RecordBatch`` es in the Spark Kafka schema
    (see :mod:`kwire.spark.arrow`), decoded column-wise without per-record objects.

    With ``settings.progress``, a range read to its end is reported to that accumulator."""
    r = _as_range(offset_range)
    batches = _read_arrow(settings, r, schema)
    return batches if settings.progress is None else _reported_batches(settings, r, batches)


def _read_arrow(settings: ReadSettings, r: OffsetRange, schema: Any) -> Iterator[Any]:
    from . import arrow as _arrow

    if r.size == 0:
        return
    if schema is None:
        schema = _arrow.kafka_arrow_schema(settings.include_headers)
    cfg = settings.config()
    check_crc = cfg.check_crcs
    lease = _Lease(settings)
    ok = False
    try:
        for chunk in fetch_chunks(lease.client, settings, r.topic, r.partition, r.from_offset, r.until_offset, cfg,
                                  topic_id=r.topic_id):
            # the chunk's runs (read_committed: aborted batches left out) with one decoder
            cols = _records.decode_columns(chunk.data, check_crc, ranges=chunk.runs)
            batch = _arrow.to_record_batch(cols, r.topic, r.partition, chunk.lo, chunk.until, schema)
            if batch is not None:
                yield batch
        ok = True
    finally:
        lease.done(ok)
