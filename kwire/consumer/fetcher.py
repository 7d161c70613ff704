"""Fetching as a state machine that does no I/O: at most one Fetch in flight per broker.

    fetcher.poll(now_ms)                     -> PollResult  Fetch requests for idle leaders,
                                                            and the end of the first backoff
    fetcher.on_response(request, resp, now)  -> [FetchedChunk]  raw record sets, per partition
    fetcher.decode_piece(chunk, max_bytes)   -> FetchedChunk    the next records of a raw chunk
    fetcher.release(tp, nbytes)              the application took ``nbytes`` of decoded data

Incremental fetch sessions (KIP-227), one :class:`FetchSession` per broker.  The first request
(epoch 0) lists every partition and the broker answers with a session id; later requests
(epoch 1, 2, ...) list only partitions whose fetch state changed since the previous request
(new, or a new fetch offset / leader epoch) and name the partitions to drop
(``forgotten_topics_data``); the broker answers only for partitions with news.
FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH (or any failure) start over with a
full fetch.  A partition left in a session keeps being fetched by the broker, so partitions we
do not want now (paused, buffer full, moving) are forgotten explicitly.

Topics are named by id from Fetch v13; a request with a topic whose id is unknown is capped at
v12, and a session never mixes the two (changing over starts a new session).

Prefetch is bounded in bytes of memory (queued.max.messages.kbytes), whatever the compression.
Fetched record sets stay raw (as they came, compressed) until the application is about to need
them; :meth:`Fetcher.decode_piece` then decodes a raw chunk a piece at a time, each piece at
most about ``piece_bytes`` of *decoded* records (decompressed key/value/header bytes plus
``RECORD_OVERHEAD_BYTES`` of Python objects per record, counted from the codec's
``record_bytes``), so one response's expansion is never materialised at once.  The budget holds
both: raw bytes (counted per Fetch answer, whose frame stays in memory until its last partition
is decoded) and decoded pieces not yet released by the application; ``decode_ahead_bytes`` of
it (a quarter, at most 8 MiB) is kept for decoded pieces and ``worker_ahead_bytes`` (an eighth,
at most 8 MiB) for the batches the codec's decompression worker inflates ahead of the decoder
(``max_ahead_bytes``: fewer slots, or no worker, under a small budget).  Nothing is fetched
while raw bytes plus those reach the budget, a partition whose own buffered bytes reach its
fair share is left out, and a request asks for at most the bytes still free.  The batch being
decoded is decompressed whole (at most fetch.max.decompressed.bytes, else
DecompressionLimitError): that block, and the last piece's overshoot, come on top (the slack).

Records: the record layer's header scan (``kwire.records.scan_spans``) reads each answer's
entry headers before anything is decoded, and its read_committed filter
(``aborted_spans``/``record_runs``: the response's aborted_transactions say which producer's
batches from which offset; its abort marker ends them) picks the byte runs one record
iterator decodes (``iter_records(ranges=...)``); control batches are never returned.  The position moves to the last offset of the last complete batch
+ 1 (with that batch's leader epoch, KIP-320), so control batches, aborted transactions and
compaction gaps are stepped over; a trailing partial batch (cut by the size limit) is left
for the next fetch.  A damaged entry ends the scan: the records before it are handed out and
decoding reports the damage; damage at the first entry is reported at once.

Failures: a lost connection or a timeout is retried quietly (after retry.backoff.ms); an answer
that cannot be read (a ProtocolError: absurd lengths, a truncated or undecodable frame) is
retried too but reported as an ErrorAction (the consumer passes it to error_cb, or logs it) and
logged, once per broker until a fetch from it succeeds again -- garbage is never silent.
"""
from __future__ import annotations

import logging
from functools import partial
from itertools import islice
from typing import Any, Callable

from ..errors import KafkaConnectionError, KafkaTimeoutError, KwireError
from ..protocol.schema import ZERO_UUID
from ._codes import E, error as broker_error, is_invalid_metadata
from .subscription import SubscriptionState
from .types import ErrorAction, PollResult, Request

log = logging.getLogger("kwire.consumer.fetcher")

TP = tuple
INITIAL_EPOCH = 0
INT32_MAX = 2**31 - 1
CONSUMER_REPLICA_ID = -1
_SESSION_ERRORS = {E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH,
                   E.FETCH_SESSION_TOPIC_ID_ERROR}
_METADATA_ERRORS = {E.NOT_LEADER_OR_FOLLOWER, E.REPLICA_NOT_AVAILABLE, E.KAFKA_STORAGE_ERROR,
                    E.FENCED_LEADER_EPOCH, E.OFFSET_NOT_AVAILABLE, E.UNKNOWN_TOPIC_OR_PARTITION,
                    E.UNKNOWN_TOPIC_ID, E.INCONSISTENT_TOPIC_ID, E.LEADER_NOT_AVAILABLE,
                    E.UNKNOWN_LEADER_EPOCH}


class FetchedChunk:
    """One partition's data from one Fetch response: raw (``data``, ``nbytes`` of them) until
    :meth:`Fetcher.decode_piece` hands out its records piece by piece, each piece a
    FetchedChunk with ``records`` (in offset order) and ``nbytes`` its decoded cost."""

    __slots__ = ("tp", "records", "fence", "nbytes", "next_offset", "high_watermark", "data",
                 "fetch_offset", "aborted", "frame", "it", "done", "resume_offset",
                 "seen_bytes", "cost", "count", "error", "careful", "spans")

    def __init__(self, tp, records, fence, nbytes, next_offset, high_watermark, data=None,
                 fetch_offset=-1, aborted=None):
        self.tp = tp
        self.records = records
        self.fence = fence
        self.nbytes = nbytes
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        self.data = data
        self.fetch_offset = fetch_offset
        self.aborted = aborted
        self.frame = None          # the _Frame whose bytes this raw chunk holds
        self.it = None             # the record iterator while it is being decoded
        self.done = False          # every record handed out (or dropped): the raw bytes went
        self.resume_offset = fetch_offset  # the offset after the last piece handed out
        self.seen_bytes = 0        # the iterator's record_bytes when last looked at
        self.cost = 0              # decoded cost and records handed out so far
        self.count = 0
        self.error = None          # the failure that ends it, after the records before it
        self.careful = False       # after a failure: decoded again a record at a time
        self.spans = None          # read_committed with aborted transactions: the entries' spans

    def __repr__(self) -> str:
        return (f"FetchedChunk({self.tp}, {len(self.records)} records, next={self.next_offset}, "
                f"fence={self.fence})")


class _Frame:
    """One Fetch answer's frame: its partitions' record sets are views of it, so it stays in
    memory until the last of its raw chunks is done; the budget counts it until then."""
    __slots__ = ("pending", "nbytes")

    def __init__(self, pending: int, nbytes: int):
        self.pending = pending
        self.nbytes = nbytes


class FetchSession:
    """The client half of one broker's incremental fetch session (KIP-227)."""

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TP, tuple] = {}  # what the broker's session holds for us
        self.topic_ids: bool | None = None     # does the session name topics by id?
        self._pending: dict[TP, tuple] | None = None

    def build(self, wanted: dict[TP, tuple], *, topic_ids: bool, sessions: bool
              ) -> tuple[dict[TP, tuple], list[TP], int, int]:
        """(partitions to send, partitions to forget, session id, epoch) for a request that
        should leave the session holding exactly ``wanted``."""
        if not sessions:
            self.session_id, self.epoch, self.partitions = 0, INITIAL_EPOCH, {}
            self._pending = None
            return dict(wanted), [], 0, -1  # sessionless full fetch
        if self.topic_ids is not None and self.topic_ids != topic_ids:
            self.epoch, self.partitions = INITIAL_EPOCH, {}  # close it; start over
        self.topic_ids = topic_ids
        self._pending = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return dict(wanted), [], self.session_id, INITIAL_EPOCH
        send = {tp: d for tp, d in wanted.items() if self.partitions.get(tp) != d}
        forget = [tp for tp in self.partitions if tp not in wanted]
        return send, forget, self.session_id, self.epoch

    def on_response(self, error_code: int, session_id: int) -> bool:
        """Advance after a response; False if the session broke (the next fetch is full)."""
        pending, self._pending = self._pending, None
        if error_code != 0:
            self.reset(keep_id=error_code not in _SESSION_ERRORS)
            return False
        if pending is None:
            return True  # sessionless
        if self.epoch == INITIAL_EPOCH:
            if session_id == 0:
                # The broker did not open a session: every fetch is a full one.
                self.session_id, self.partitions = 0, {}
                return True
            self.session_id = session_id
            self.epoch = 1
        else:
            self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1
        self.partitions = pending
        return True

    def reset(self, keep_id: bool = True) -> None:
        """Start over with a full fetch (epoch 0 with our id asks the broker to replace the old
        session; without an id it opens a fresh one)."""
        if not keep_id:
            self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.partitions = {}
        self._pending = None


def _records_module():
    from .. import records  # the record layer; records are decoded in the driver thread
    return records


def scan_record_set(data, until_damage: bool = True) -> list:
    """The spans (kwire.records.scan_spans) of a Fetch answer's record set; by default up to
    any damage, which the decoding then reports with the records before it."""
    spans: list = _records_module().scan_spans(data, until_damage=until_damage)
    return spans


def _record_overhead_bytes() -> int:
    from .._impl import IMPLEMENTATION
    # A Record with a bytes value (and key) and its slot in a list, beyond the bytes themselves:
    # ~120 bytes measured with tracemalloc for the compiled codec, ~230 for the pure twin.
    return 128 if IMPLEMENTATION == "cython" else 240


RECORD_OVERHEAD_BYTES = _record_overhead_bytes()
DECODE_AHEAD_BYTES = 8 << 20   # the most decoded data waiting for the application
WORKER_AHEAD_BYTES = 8 << 20   # the most the decompression worker holds ahead of the decoder
_MIN_PIECE_BYTES = 4096
_MAX_STEP = 1 << 16            # records taken from the iterator at once


def decode_records(iter_records: Callable, data, fetch_offset: int, *, topic: str, partition: int,
                   aborted: list | None, read_committed: bool, check_crc: bool) -> list:
    """The user records at or after ``fetch_offset`` (aborted transactions dropped under
    read_committed)."""
    return decode_partition(iter_records, data, fetch_offset, topic=topic, partition=partition,
                            aborted=aborted, read_committed=read_committed, check_crc=check_crc)[0]


def decode_partition(iter_records: Callable, data, fetch_offset: int, *, topic: str, partition: int,
                     aborted: list | None, read_committed: bool, check_crc: bool
                     ) -> tuple[list, int, int | None]:
    """(records at or after ``fetch_offset``, next fetch offset, the last leader epoch known
    of its entries) from one partition's record set, all at once: the header scan and the
    read_committed filter of kwire.records pick the byte runs to decode."""
    rl = _records_module()
    spans = rl.scan_spans(data) if data else []
    if not spans:
        return [], fetch_offset, None
    next_offset = max(fetch_offset, spans[-1].last_offset + 1)
    last_epoch = next((sp.leader_epoch for sp in reversed(spans)
                       if sp.leader_epoch >= 0 and sp.last_offset >= fetch_offset), None)
    skip = rl.aborted_spans(spans, aborted) if read_committed else ()
    runs = rl.record_runs(spans, skip, fetch_offset)
    records = list(iter_records(data, check_crc, topic, partition, ranges=runs))
    if records and records[0].offset < fetch_offset:  # (the broker returns whole batches)
        records = [r for r in records if r.offset >= fetch_offset]
    return records, next_offset, last_epoch


class Fetcher:
    def __init__(self, subscriptions: SubscriptionState, metadata, *, fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, buffer_budget_bytes: int = 64 << 20,
                 read_committed: bool = True, check_crcs: bool = False, client_rack: str | None = None,
                 retry_backoff_ms: int = 100, request_timeout_ms: int = 30000,
                 iter_records: Callable | None = None, scan: Callable = scan_record_set,
                 max_decompressed_bytes: int | None = None):
        self.subs = subscriptions
        self.metadata = metadata
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.buffer_budget_bytes = buffer_budget_bytes
        self.read_committed = read_committed
        self.check_crcs = check_crcs
        self.client_rack = client_rack or ""
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        # the part of the budget kept for decoded pieces, the size of one piece, and the part
        # kept for the decompression worker's batches (see the module docstring)
        self.decode_ahead_bytes = max(1, min(DECODE_AHEAD_BYTES, buffer_budget_bytes // 4))
        self.piece_bytes = max(_MIN_PIECE_BYTES, self.decode_ahead_bytes // 4)
        self.worker_ahead_bytes = 0
        if iter_records is None:
            rl = _records_module()
            self.worker_ahead_bytes = min(WORKER_AHEAD_BYTES, buffer_budget_bytes // 8)
            iter_records = partial(rl.iter_records, max_ahead_bytes=self.worker_ahead_bytes)
        if max_decompressed_bytes is not None:
            # fetch.max.decompressed.bytes: a batch expanding past it is a DecompressionLimitError
            # (a CorruptRecordError), reported like any corrupt record set (see decode_piece())
            iter_records = partial(iter_records, max_decompressed_bytes=max_decompressed_bytes)
        self._iter_records = iter_records
        self._scan = scan
        self.sessions: dict[int, FetchSession] = {}
        self.inflight: dict[int, Request] = {}
        self.buffered: dict[TP, int] = {}   # raw + decoded bytes per partition (fair share)
        self.buffered_total = 0              # raw (per frame) + decoded bytes
        self.decoded_total = 0               # decoded pieces the application has not released
        self._backoff_until: dict[TP, int] = {}
        self._node_backoff_until: dict[int, int] = {}
        self._decode_failed: set = set()
        self._garbled_nodes: set = set()  # nodes whose last answer could not be read (reported)
        self._actions: list = []
        self.starved = False  # True while the buffer budget keeps us from fetching

    def drain_actions(self) -> list:
        out, self._actions = self._actions, []
        return out

    def release(self, tp: TP, nbytes: int) -> None:
        """The application consumed (or dropped) a decoded piece of ``nbytes`` for ``tp``."""
        self._release_tp(tp, nbytes)
        self.buffered_total = max(0, self.buffered_total - nbytes)
        self.decoded_total = max(0, self.decoded_total - nbytes)

    def _release_tp(self, tp: TP, nbytes: int) -> None:
        left = self.buffered.get(tp, 0) - nbytes
        if left > 0:
            self.buffered[tp] = left
        else:
            self.buffered.pop(tp, None)

    def finish(self, chunk: FetchedChunk) -> None:
        """A raw chunk is done with (decoded to the end, failed, or dropped as stale): its raw
        bytes leave the budget, and its frame's once the frame's last chunk is done."""
        if chunk.done:
            return
        chunk.done = True
        chunk.it = chunk.data = None
        self._release_tp(chunk.tp, chunk.nbytes)
        frame, chunk.frame = chunk.frame, None
        if frame is None:
            self.buffered_total = max(0, self.buffered_total - chunk.nbytes)
            return
        frame.pending -= 1
        if frame.pending <= 0:
            self.buffered_total = max(0, self.buffered_total - frame.nbytes)

    def release_all(self) -> None:
        self.buffered.clear()
        self.buffered_total = 0
        self.decoded_total = 0

    def _raw_full(self) -> int:
        """Bytes the budget has no room for: raw bytes, the decoded pieces or the room kept
        for them (whichever is more), and the room kept for the decompression worker."""
        return self.buffered_total - self.decoded_total + max(
            self.decoded_total, self.decode_ahead_bytes) + self.worker_ahead_bytes

    # --- poll ----------------------------------------------------------------------------------

    def _partition_data(self, tp: TP) -> tuple:
        st = self.subs.state(tp)
        pos = st.position
        p = self.metadata.partition(tp[0], tp[1])
        leader_epoch = p.leader_epoch if p is not None and p.leader_epoch is not None else -1
        last_epoch = pos.offset_epoch if pos.offset_epoch is not None else -1
        return (pos.offset, leader_epoch, last_epoch, self.max_partition_fetch_bytes)

    def poll(self, now_ms: int) -> PollResult:
        return PollResult(self._fetches(now_ms), self._backoff_end_ms())

    def _fetches(self, now_ms: int) -> list[Request]:
        out: list[Request] = []
        for backoffs in (self._backoff_until, self._node_backoff_until):
            for key in [k for k, t in backoffs.items() if t <= now_ms]:
                del backoffs[key]
        fetchable = self.subs.fetchable()
        if not fetchable:
            self.starved = False
            return out
        if self._decode_failed:  # corrupt data: try again, but not in a hot loop
            for tp in self._decode_failed:
                self._backoff_until[tp] = now_ms + self.retry_backoff_ms
            self._decode_failed.clear()
        used = self._raw_full()
        if used >= self.buffer_budget_bytes:
            self.starved = True
            return out
        room = max(1, self.buffer_budget_bytes - self.decode_ahead_bytes
                   - self.worker_ahead_bytes)  # for raw bytes
        share = max(room // max(1, len(fetchable)), self.max_partition_fetch_bytes)
        by_node: dict[int, dict[TP, tuple]] = {}
        any_skipped = False
        for tp in fetchable:
            if self.buffered.get(tp, 0) >= share:
                any_skipped = True
                continue
            if tp in self._backoff_until:
                continue
            node = self.metadata.leader_for(tp[0], tp[1])
            if node is None:
                self.metadata.request_update()
                continue
            by_node.setdefault(node, {})[tp] = self._partition_data(tp)
        self.starved = any_skipped
        free = self.buffer_budget_bytes - used
        for node, wanted in by_node.items():
            if node in self.inflight or now_ms < self._node_backoff_until.get(node, 0):
                continue
            out.append(self._request(node, wanted, min(self.fetch_max_bytes, max(free, 1))))
        return out

    def _backoff_end_ms(self) -> int | None:
        """The end of the earliest backoff (poll() drops expired ones, so this is ahead)."""
        ds = list(self._backoff_until.values()) + list(self._node_backoff_until.values())
        return min(ds) if ds else None

    def _request(self, node: int, wanted: dict[TP, tuple], max_bytes: int) -> Request:
        session = self.sessions.get(node)
        if session is None:
            session = self.sessions[node] = FetchSession(node)
        ids = {t: self.metadata.topic_id(t) for t in {tp[0] for tp in wanted}}
        all_ids = all(v is not None and v != ZERO_UUID for v in ids.values())
        fetched_offsets = {tp: d[0] for tp, d in wanted.items()}
        leader_epochs = {tp: d[1] for tp, d in wanted.items()}
        context: dict[str, Any] = {"node": node, "offsets": fetched_offsets,
                                   "leader_epochs": leader_epochs, "id_to_name": {}, "sent": False}

        def build(version: int) -> dict:
            use_ids = version >= 13
            send, forget, session_id, epoch = session.build(
                wanted, topic_ids=use_ids, sessions=version >= 7)
            context["sent"] = True
            context["id_to_name"] = {v: k for k, v in ids.items() if v is not None}
            topics: dict[str, list] = {}
            for (topic, partition), (offset, leader_epoch, last_epoch, pmax) in sorted(send.items()):
                topics.setdefault(topic, []).append({
                    "partition": partition, "current_leader_epoch": leader_epoch,
                    "fetch_offset": offset, "last_fetched_epoch": last_epoch,
                    "log_start_offset": -1, "partition_max_bytes": pmax})
            forgotten: dict[str, list] = {}
            for topic, partition in sorted(forget):
                forgotten.setdefault(topic, []).append(partition)
            return {
                "replica_id": CONSUMER_REPLICA_ID, "max_wait_ms": self.fetch_max_wait_ms,
                "min_bytes": self.fetch_min_bytes, "max_bytes": max_bytes,
                "isolation_level": 1 if self.read_committed else 0,
                "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": t, "topic_id": ids.get(t) or ZERO_UUID, "partitions": ps}
                           for t, ps in topics.items()],
                "forgotten_topics_data": [{"topic": t, "topic_id": ids.get(t) or ZERO_UUID,
                                           "partitions": ps} for t, ps in forgotten.items()],
                "rack_id": self.client_rack,
            }

        req = Request(node, "Fetch", build, max_version=None if all_ids else 12,
                      timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms,
                      context=context, owner=self)
        self.inflight[node] = req
        return req

    def decode(self, chunk: FetchedChunk) -> FetchedChunk | None:
        """Decode a whole raw chunk at once (see :meth:`decode_piece`; for tests and callers
        without a budget)."""
        piece = self.decode_piece(chunk, None)
        if piece is not None and not piece.records and piece.nbytes:
            self.release(piece.tp, piece.nbytes)
            piece.nbytes = 0
        return piece

    def _records_of(self, chunk: FetchedChunk):
        data = chunk.data
        tp = chunk.tp
        if not (self.read_committed and chunk.aborted):
            return self._iter_records(data, self.check_crcs, tp[0], tp[1])
        # read_committed with aborted transactions: kwire.records' filter says which byte runs
        # hold records to hand out (over the spans of the scan in _partition); one iterator
        # decodes just those
        spans = chunk.spans if chunk.spans is not None else self._scan(data)
        rl = _records_module()
        runs = rl.record_runs(spans, rl.aborted_spans(spans, chunk.aborted), chunk.fetch_offset)
        return self._iter_records(data, self.check_crcs, tp[0], tp[1], ranges=runs)

    def decode_piece(self, chunk: FetchedChunk, max_bytes: int | None) -> FetchedChunk | None:
        """The next records of a raw chunk from :meth:`on_response` (decoded after the next
        Fetch went out, so the broker works while we decode): a FetchedChunk of records whose
        decoded cost (``nbytes``, counted in the budget until :meth:`release`) is about
        ``max_bytes`` (None: all), or None.  ``chunk.done`` says the chunk is finished (its raw
        bytes are released then).  The last piece carries the chunk's ``next_offset``, and
        comes back even without records (only control batches or aborted transactions), so the
        application's position moves past them; a corrupt record set rewinds the position to
        after the last piece handed out, reports the error and gives None."""
        if chunk.done:
            return None
        tp = chunk.tp
        if chunk.error is not None:
            return self._failed(chunk)
        recs: list = []
        cost = 0
        exhausted = False
        try:
            it = chunk.it
            if it is None:
                it = chunk.it = self._records_of(chunk)
            counted = getattr(it, "record_bytes", None) is not None
            # kwire.records' iterator stops before a batch once record_bytes reaches stop_at:
            # a piece is whole batches up to about max_bytes, cut further by a record count
            # (the objects) within a batch of many small records
            stops = counted and max_bytes is not None and hasattr(it, "stop_at")
            if max_bytes is None:
                step = _MAX_STEP
            elif stops:
                step = 0  # set in the loop
            elif chunk.count == 0:
                step = 1  # nothing known of this chunk's records yet: 1, 2, 4, ... at first
            else:
                step = max(1, min(_MAX_STEP, int(max_bytes * chunk.count / chunk.cost)))
            while True:
                if stops:
                    room = max_bytes - cost if recs else max_bytes
                    it.record_cost = RECORD_OVERHEAD_BYTES
                    it.stop_at = it.record_bytes + it.handed * RECORD_OVERHEAD_BYTES + max(room, 0)
                    step = max(1, min(_MAX_STEP, room // RECORD_OVERHEAD_BYTES))
                if chunk.careful:
                    step = 1
                got = list(islice(it, step))
                n = len(got)
                if counted:
                    b = it.record_bytes
                    cost += b - chunk.seen_bytes + n * RECORD_OVERHEAD_BYTES
                    chunk.seen_bytes = b
                else:  # an iterator that does not count (test doubles)
                    cost += sum(len(r.value or b"") for r in got) + n * RECORD_OVERHEAD_BYTES
                if got:
                    if got[0].offset < chunk.resume_offset:  # (the broker returns whole batches)
                        got = [r for r in got if r.offset >= chunk.resume_offset]
                    if recs:
                        recs.extend(got)
                    else:
                        recs = got
                if stops:
                    if it.exhausted:
                        exhausted = True
                        break
                    if (n < step or cost >= max_bytes) and recs:
                        break  # (n < step: stopped before a batch, the bytes are reached)
                    continue
                if n < step:
                    exhausted = True
                    break
                if max_bytes is not None:
                    if cost >= max_bytes and recs:
                        break
                    per = (chunk.cost + cost) / (chunk.count + len(recs) or n)
                    step = max(1, min(_MAX_STEP, 2 * step,
                                      int((max_bytes - cost) / per) if cost < max_bytes else 1))
        except KwireError as exc:  # (kwire.records skips a partial trailing batch: this is damage)
            # The error's traceback holds this frame, and the chunk will hold the error: the
            # iterator must not be in that cycle.  (The garbage collector clears a memoryview
            # in cyclic garbage even while a decoder still holds a buffer of it; the decoder's
            # release then crashes CPython 3.11.)
            chunk.it = it = None
            if not chunk.careful:
                # the records decoded in the step that failed went with it: decode again from
                # after those handed out, a record at a time, to hand out all before the damage
                chunk.careful = True
                chunk.seen_bytes = 0
                if not recs:
                    return self.decode_piece(chunk, max_bytes)
            else:
                chunk.error = exc
                if not recs:
                    return self._failed(chunk)
            # the records before the failure go out first; the rest with the next call
        chunk.cost += cost
        chunk.count += len(recs)
        if exhausted:
            self.finish(chunk)
            next_offset = chunk.next_offset
        elif recs:
            next_offset = recs[-1].offset + 1
        else:
            return None
        chunk.resume_offset = next_offset
        self.buffered[tp] = self.buffered.get(tp, 0) + cost
        self.buffered_total += cost
        self.decoded_total += cost
        return FetchedChunk(tp, recs, chunk.fence, cost, next_offset, chunk.high_watermark)

    def _failed(self, chunk: FetchedChunk) -> None:
        """A raw chunk that cannot be decoded further: fetch it again from after the records
        handed out (a new fence makes later chunks of the partition stale), report the error."""
        exc, tp = chunk.error, chunk.tp
        self.finish(chunk)
        st = self.subs.get(tp)
        if st is not None and st.fence == chunk.fence and st.position is not None:
            self.subs.seek(tp, chunk.resume_offset)
        if getattr(exc, "partitions", None) is None:  # error_cb and the log name the partition
            exc.partitions = [tp]
            if getattr(exc, "offset", None) is None:  # (a limit error names its batch)
                exc.offset = chunk.resume_offset
        self._actions.append(ErrorAction(exc, partitions=[tp]))
        self._decode_failed.add(tp)

    def _first_entry_damaged(self, tp: TP, data, fetched_offset: int, now_ms: int) -> None:
        """No complete entry came: the answer was cut inside the first (fetched again later),
        or the first entry is damaged, which is reported (and the partition backed off) like
        a record set that fails to decode -- there are no records before it to hand out."""
        try:
            self._scan(data, False)
        except KwireError as exc:
            err: Any = exc  # error_cb and the log name the partition and offset
            err.partitions = [tp]
            if getattr(err, "offset", None) is None:
                err.offset = fetched_offset
            self._actions.append(ErrorAction(exc, partitions=[tp]))
            self._backoff_until[tp] = now_ms + self.retry_backoff_ms

    # --- responses -----------------------------------------------------------------------------

    def on_response(self, request: Request, resp, now_ms: int) -> list[FetchedChunk]:
        ctx = request.context
        node = ctx["node"]
        if self.inflight.get(node) is request:
            del self.inflight[node]
        session = self.sessions.get(node)
        if isinstance(resp, BaseException):
            if isinstance(resp, (KafkaConnectionError, KafkaTimeoutError)) or \
                    not isinstance(resp, KwireError):
                log.debug("fetch from node %s failed: %s", node, resp)
            elif node not in self._garbled_nodes:
                # the broker's answer could not be read: it may say the same again and again
                self._garbled_nodes.add(node)
                log.warning("fetch from node %s failed: %s", node, resp)
                self._actions.append(ErrorAction(resp, partitions=sorted(ctx["offsets"])))
            if session is not None:
                session.reset()
            self._node_backoff_until[node] = now_ms + self.retry_backoff_ms
            self.metadata.request_update()
            return []
        self._node_backoff_until.pop(node, None)
        self._garbled_nodes.discard(node)
        top_code = resp.get("error_code", 0)
        if session is not None:
            session.on_response(top_code, resp.get("session_id", 0))
        if top_code != 0:
            if top_code not in _SESSION_ERRORS:
                self._actions.append(ErrorAction(broker_error(top_code)))
                self._node_backoff_until[node] = now_ms + self.retry_backoff_ms
            return []
        id_to_name = ctx["id_to_name"]
        offsets = ctx["offsets"]
        leader_epochs = ctx["leader_epochs"]
        chunks: list[FetchedChunk] = []
        for t in resp.get("responses", ()):
            topic = t.get("topic")
            if not topic:
                topic = id_to_name.get(t.get("topic_id")) or self.metadata.topic_name(t.get("topic_id"))
            if topic is None:
                continue
            for p in t.get("partitions", ()):
                tp = (topic, p["partition_index"])
                chunk = self._partition(tp, offsets.get(tp), leader_epochs.get(tp), p, now_ms)
                if chunk is not None:
                    chunks.append(chunk)
        if chunks:
            # the chunks are views of one frame: its bytes leave the budget with the last one
            frame = _Frame(len(chunks), sum(c.nbytes for c in chunks))
            for c in chunks:
                c.frame = frame
        return chunks

    def _partition(self, tp: TP, fetched_offset: int | None, leader_epoch: int | None, p: dict,
                   now_ms: int) -> FetchedChunk | None:
        st = self.subs.get(tp)
        if st is None or not st.fetchable or fetched_offset is None \
                or st.position.offset != fetched_offset:
            return None  # stale: the partition moved, paused or left while we fetched
        code = p.get("error_code", 0)
        if code == 0:
            self.subs.update_watermarks(tp, p.get("high_watermark"), p.get("last_stable_offset"),
                                        p.get("log_start_offset"))
            div = p.get("diverging_epoch")
            if div is not None and div.get("epoch", -1) >= 0:
                # KIP-320 via Fetch v12+: the leader says the epoch of our last record
                # diverged; OffsetForLeaderEpoch finds out where (PositionManager).
                log.info("%s: leader reports diverging epoch %s", tp, div)
                self.subs.request_validation(tp)
                return None
            data = p.get("records")
            if not data:
                return None
            spans = self._scan(data)  # the entries' headers, up to any damage
            if not spans:
                self._first_entry_damaged(tp, data, fetched_offset, now_ms)
                return None  # no complete batch (yet)
            last = spans[-1]
            if last.last_offset < fetched_offset:
                return None  # only batches before the position
            next_offset = last.last_offset + 1
            # KIP-320: the epoch of the last entry fetched (magic 0/1 entries carry none)
            last_epoch = last.leader_epoch if last.magic >= 2 else None
            # The leader accepted our current_leader_epoch: the position now stands under it.
            self.subs.advance(tp, next_offset, last_epoch, leader_epoch)
            # `data` is a view of the Fetch answer's frame, which stays in memory while any of its
            # partitions' chunks is raw: the budget counts the frame's record bytes until then
            # (see _Frame; the frame's headers are not counted).
            nbytes = len(data)
            self.buffered[tp] = self.buffered.get(tp, 0) + nbytes
            self.buffered_total += nbytes
            aborted = p.get("aborted_transactions")
            chunk = FetchedChunk(tp, None, st.fence, nbytes, next_offset, st.high_watermark,
                                 data, fetched_offset, aborted)
            if self.read_committed and aborted:
                chunk.spans = spans  # for the read_committed filter (_records_of)
            return chunk
        if code == E.OFFSET_OUT_OF_RANGE:
            log.info("%s: offset %d out of range; resetting (%s)", tp, fetched_offset,
                     self.subs.default_reset.value)
            err = self.subs.request_reset(tp)
            if err is not None:
                self._actions.append(ErrorAction(broker_error(code, f"{tp[0]} [{tp[1]}] offset "
                                                              f"{fetched_offset}"), partitions=[tp]))
            return None
        if code in _METADATA_ERRORS or is_invalid_metadata(code):
            self.metadata.request_update()
            self._backoff_until[tp] = now_ms + self.retry_backoff_ms
            return None
        self._actions.append(ErrorAction(broker_error(code, f"{tp[0]} [{tp[1]}]"), partitions=[tp]))
        self._backoff_until[tp] = now_ms + self.retry_backoff_ms
        return None
