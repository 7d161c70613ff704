"""Fetched record sets between the Fetch answer and the application: the memory budget they
count against (:class:`FetchBuffer`, one owner of every byte count) and their decoding a piece
at a time (:class:`ChunkDecoder`).  The :class:`~kwire.consumer.fetcher.Fetcher` makes raw
chunks from Fetch answers and asks the buffer for room before it fetches; the Consumer's
application thread decodes them (:class:`HandBack` gives each finished raw chunk back to the
driver's buffer), so the driver thread is left the network and the records' decoding never
waits for the driver to win the GIL.

Prefetch is bounded in bytes of memory (queued.max.messages.kbytes), whatever the compression.
Fetched record sets stay raw (as they came, compressed) until the application is about to need
them; :meth:`ChunkDecoder.decode_piece` then decodes a raw chunk a piece at a time, each piece
at most about ``piece_bytes`` of *decoded* records (decompressed key/value/header bytes plus
``RECORD_OVERHEAD_BYTES`` of Python objects per record, counted from the codec's
``record_bytes``), so one response's expansion is never materialised at once.  The budget counts
raw bytes (per Fetch answer, whose frame stays in memory until its last partition is decoded
and handed back); ``decode_ahead_bytes`` of it (a quarter, at most 8 MiB) is kept for the
decoded piece the application holds and ``worker_ahead_bytes`` (an eighth,
at most 8 MiB) for the batches the codec's decompression worker inflates ahead of the decoder
(``max_ahead_bytes``: fewer slots, or no worker, under a small budget).  The batch being
decoded is decompressed whole (at most fetch.max.decompressed.bytes, else
DecompressionLimitError): that block, and the last piece's overshoot, come on top (the slack).

A damaged entry: the records before it are handed out first (decoded again a record at a time
after the failure), then the error is reported, and the Fetcher rewinds the position to after
the last record handed out and backs the partition off (``on_failed``).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import islice
from types import ModuleType
from typing import Any, Protocol

from ..errors import KwireError
from .types import ErrorAction

TP = tuple[str, int]  # (topic, partition)


def _records_module() -> ModuleType:
    from .. import records  # the record layer; records are decoded in the driver thread
    return records


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
# How much one Fetch answer asks for.  Kafka answers one Fetch per node at a time, so a small
# answer leaves the consumer waiting on the broker's turnaround (and costs the broker a request
# per answer), a large one is read whole before its first record is decoded, after it left the
# CPU's cache.  Measured on Kafka 4.3 (3M records of 100 B, 1-12 partitions, one node; a 2-core
# machine with 32 MiB of L3): answers of ~12 MiB read fastest; 3 MiB ones (three partitions at
# Java's 1 MiB each) 1.2-1.4x slower, 24-48 MiB ones 1.4-1.6x slower with ~40% more CPU per record.
ANSWER_TARGET_BYTES = 12 << 20
PARTITION_FETCH_BYTES = 1 << 20  # max.partition.fetch.bytes's default: the least a partition gets


def fetch_answer_bytes(budget_bytes: int, fetch_max_bytes: int, partition_max_bytes: int | None = None) -> int:
    """The bytes to ask one Fetch answer for: ANSWER_TARGET_BYTES, at most fetch.max.bytes and a
    quarter of the memory budget (answers on the way overlap the one being decoded), but never
    less than an explicit max.partition.fetch.bytes (``partition_max_bytes``)."""
    target = max(1, min(fetch_max_bytes, ANSWER_TARGET_BYTES, budget_bytes // 4))
    return max(target, partition_max_bytes or 0)


def partition_fetch_bytes(answer_bytes: int, partitions: int) -> int:
    """max.partition.fetch.bytes when the user gave none: the answer shared by the node's
    ``partitions`` (one partition may fill it), but at least Java's default of 1 MiB."""
    return max(PARTITION_FETCH_BYTES, answer_bytes // max(1, partitions))


class FetchedChunk:
    """One partition's data from one Fetch response: raw (``data``, ``nbytes`` of them) until
    :meth:`Fetcher.decode_piece` hands out its records piece by piece, each piece a
    FetchedChunk with ``records`` (in offset order) and ``nbytes`` its decoded cost."""

    __slots__ = ("tp", "records", "fence", "nbytes", "next_offset", "high_watermark", "data",
                 "fetch_offset", "aborted", "frame", "it", "done", "resume_offset",
                 "seen_bytes", "cost", "count", "error", "careful", "spans")

    def __init__(self, tp: TP, records: list[Any] | None, fence: int, nbytes: int, next_offset: int,
                 high_watermark: int | None, data: Any = None, fetch_offset: int = -1,
                 aborted: list[dict[str, Any]] | None = None) -> None:
        self.tp = tp
        self.records = records
        self.fence = fence
        self.nbytes = nbytes
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        self.data = data
        self.fetch_offset = fetch_offset
        self.aborted = aborted
        self.frame: _Frame | None = None  # the _Frame whose bytes this raw chunk holds
        self.it: Any = None        # the record iterator while it is being decoded
        self.done = False          # every record handed out (or dropped): the raw bytes went
        self.resume_offset = fetch_offset  # the offset after the last piece handed out
        self.seen_bytes = 0        # the iterator's record_bytes when last looked at
        self.cost = 0              # decoded cost and records handed out so far
        self.count = 0
        self.error: Any = None     # the KwireError that ends it, after the records before it
        self.careful = False       # after a failure: decoded again a record at a time
        self.spans: list[Any] | None = None  # read_committed with aborted transactions: entry spans

    def __repr__(self) -> str:
        n = "raw" if self.records is None else f"{len(self.records)} records"
        return (f"FetchedChunk({self.tp}, {n}, next={self.next_offset}, "
                f"fence={self.fence})")


class _Frame:
    """One Fetch answer's frame: its partitions' record sets are views of it, so it stays in
    memory until the last of its raw chunks is done; the budget counts it until then."""
    __slots__ = ("pending", "nbytes")

    def __init__(self, pending: int, nbytes: int) -> None:
        self.pending = pending
        self.nbytes = nbytes


class FetchBuffer:
    """The consumer's memory budget for fetched data (see the module docstring): raw bytes per
    Fetch answer, per partition (for its fair share) and in all, and the room kept for decoded
    pieces and the decompression worker."""

    def __init__(self, budget_bytes: int, *, worker_ahead_bytes: int = 0):
        self.budget_bytes = budget_bytes
        # the part of the budget kept for decoded pieces, the size of one piece, and the part
        # kept for the decompression worker's batches
        self.decode_ahead_bytes = max(1, min(DECODE_AHEAD_BYTES, budget_bytes // 4))
        self.piece_bytes = max(_MIN_PIECE_BYTES, self.decode_ahead_bytes // 4)
        self.worker_ahead_bytes = worker_ahead_bytes
        self.buffered: dict[TP, int] = {}   # raw bytes per partition (fair share)
        self.buffered_total = 0              # raw bytes (per frame)

    def add_raw(self, tp: TP, nbytes: int) -> None:
        self.buffered[tp] = self.buffered.get(tp, 0) + nbytes
        self.buffered_total += nbytes

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
        self.take_back(chunk)

    def take_back(self, chunk: FetchedChunk) -> None:
        """A raw chunk the application thread finished (:class:`HandBack`) leaves the budget."""
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

    def full_bytes(self) -> int:
        """Bytes the budget has no room for: raw bytes, and the room kept for decoded pieces
        and for the decompression worker."""
        return self.buffered_total + self.decode_ahead_bytes + self.worker_ahead_bytes

    def raw_room_bytes(self) -> int:
        """What the budget leaves for raw bytes (at least 1)."""
        return max(1, self.budget_bytes - self.decode_ahead_bytes - self.worker_ahead_bytes)


class Budget(Protocol):
    """What a :class:`ChunkDecoder` tells the budget (a :class:`HandBack`, in the application's
    thread): that a raw chunk is finished.  The pieces it decodes are not counted (the driver
    keeps ``decode_ahead_bytes`` for the one the application holds)."""

    def finish(self, chunk: FetchedChunk) -> None: ...


class HandBack:
    """The budget as the application thread sees it, when it decodes the raw chunks itself (the
    Consumer does): the one piece it holds at a time is not counted (the driver's FetchBuffer
    keeps ``decode_ahead_bytes`` for it), and a finished raw chunk goes back to the driver
    through ``returned``, whose FetchBuffer then releases its bytes (``take_back``); ``on_return``
    hears of each chunk's bytes (to wake a driver that waits for room)."""

    def __init__(self, returned: deque[FetchedChunk], on_return: Callable[[int], None]) -> None:
        self.returned = returned
        self.on_return = on_return

    def finish(self, chunk: FetchedChunk) -> None:
        if chunk.done:
            return
        chunk.done = True
        chunk.it = chunk.data = None
        self.returned.append(chunk)
        self.on_return(chunk.nbytes)


# A chunk that cannot be decoded further: (tp, the fence it was fetched under, the offset after
# the last record handed out).  Its partition is fetched again from there, after a backoff.
OnFailed = Callable[[TP, int, int], None]


class ChunkDecoder:
    """Raw chunks to pieces of records (the record layer's iterator; read_committed through
    its filter), counted in a :class:`Budget`.  A chunk that fails is reported in ``actions``
    and to ``on_failed`` (the Fetcher rewinds the partition and backs it off)."""

    def __init__(self, buffer: Budget, iter_records: Callable[..., Any],
                 scan: Callable[..., list[Any]], *, on_failed: OnFailed,
                 read_committed: bool, check_crcs: bool):
        self.buffer = buffer
        self._iter_records = iter_records
        self._scan = scan
        self.on_failed = on_failed
        self.read_committed = read_committed
        self.check_crcs = check_crcs
        self.actions: list[ErrorAction] = []

    def decode(self, chunk: FetchedChunk) -> FetchedChunk | None:
        """Decode a whole raw chunk at once (see :meth:`decode_piece`; for tests and callers
        without a budget)."""
        piece = self.decode_piece(chunk, None)
        if piece is not None and not piece.records:
            piece.nbytes = 0
        return piece

    def _records_of(self, chunk: FetchedChunk) -> Any:
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
        """The next records of a raw chunk from :meth:`Fetcher.on_response` (decoded after the next
        Fetch went out, so the broker works while we decode): a FetchedChunk of records whose
        decoded cost (``nbytes``) is about
        ``max_bytes`` (None: all), or None.  ``chunk.done`` says the chunk is finished (its raw
        bytes are released then).  The last piece carries the chunk's ``next_offset``, and
        comes back even without records (only control batches or aborted transactions), so the
        application's position moves past them; a corrupt record set rewinds the position to
        after the last piece handed out, reports the error and gives None."""
        if chunk.done:
            return None
        tp = chunk.tp
        if chunk.error is not None:
            self._failed(chunk)
            return None
        recs: list[Any] = []
        limit = max_bytes if max_bytes is not None else 0  # (read where max_bytes is given)
        cost = 0
        exhausted = False
        try:
            it = chunk.it
            if it is None:
                it = chunk.it = self._records_of(chunk)
            counted = getattr(it, "record_bytes", None) is not None
            take = getattr(it, "take", None)  # (kwire.records' iterators: list(islice()) in one call)
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
                    room = limit - cost if recs else limit
                    it.record_cost = RECORD_OVERHEAD_BYTES
                    it.stop_at = it.record_bytes + it.handed * RECORD_OVERHEAD_BYTES + max(room, 0)
                    step = max(1, min(_MAX_STEP, room // RECORD_OVERHEAD_BYTES))
                if chunk.careful:
                    step = 1
                got = take(step) if take is not None else list(islice(it, step))
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
                    if (n < step or cost >= limit) and recs:
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
                    self._failed(chunk)
                    return None
            # the records before the failure go out first; the rest with the next call
        chunk.cost += cost
        chunk.count += len(recs)
        if exhausted:
            self.buffer.finish(chunk)
            next_offset = chunk.next_offset
        elif recs:
            next_offset = recs[-1].offset + 1
        else:
            return None
        chunk.resume_offset = next_offset
        return FetchedChunk(tp, recs, chunk.fence, cost, next_offset, chunk.high_watermark)

    def _failed(self, chunk: FetchedChunk) -> None:
        """A raw chunk that cannot be decoded further: fetch it again from after the records
        handed out (a new fence makes later chunks of the partition stale), report the error."""
        exc, tp = chunk.error, chunk.tp
        self.buffer.finish(chunk)
        if getattr(exc, "partitions", None) is None:  # error_cb and the log name the partition
            exc.partitions = [tp]
            if getattr(exc, "offset", None) is None:  # (a limit error names its batch)
                exc.offset = chunk.resume_offset
        self.actions.append(ErrorAction(exc, partitions=[tp]))
        self.on_failed(tp, chunk.fence, chunk.resume_offset)
