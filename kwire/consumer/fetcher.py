"""Fetching as a state machine that does no I/O: at most one Fetch in flight per broker.

    fetcher.poll(now_ms)                     -> PollResult  Fetch requests for idle leaders,
                                                            and the end of the first backoff
    fetcher.on_response(request, resp, now)  -> [FetchedChunk]  raw record sets, per partition
    fetcher.make_decoder(budget, on_failed)  -> ChunkDecoder  raw chunk -> pieces of records
    fetcher.buffer.take_back(chunk)          the application finished a raw chunk
    fetcher.on_decode_failed(tp, fence, resume_offset)  a raw chunk was damaged: fetch again

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

Prefetch is bounded in bytes of memory (queued.max.messages.kbytes), whatever the compression:
the budget and the decoding of raw chunks a piece at a time are :mod:`.fetch_buffer`'s
(``FetchBuffer``, ``ChunkDecoder``).  Nothing is fetched while the buffer is full, a partition
whose own buffered bytes reach its fair share is left out, and a request asks for at most the
bytes still free.

Records: the record layer's header scan (``kwire.records.scan_spans``) reads each answer's
entry headers before anything is decoded, and its read_committed filter
(``aborted_spans``/``record_runs``: the response's aborted_transactions say which producer's
batches from which offset; its abort marker ends them) picks the byte runs one record
iterator decodes (``iter_records(ranges=...)``); control batches are never returned.  The
position moves to the last offset of the last complete batch + 1 (with that batch's leader
epoch, KIP-320), so control batches, aborted transactions and
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
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import KafkaConnectionError, KafkaTimeoutError, KwireError
from ..protocol.schema import ZERO_UUID
from ._codes import E, is_invalid_metadata
from ._codes import error as broker_error
from .fetch_buffer import (
    PARTITION_FETCH_BYTES,
    WORKER_AHEAD_BYTES,
    Budget,
    ChunkDecoder,
    FetchBuffer,
    OnFailed,
    _Frame,
    _records_module,
    fetch_answer_bytes,
    partition_fetch_bytes,
)
from .fetch_buffer import FetchedChunk as FetchedChunk  # (re-exported: its old home)
from .subscription import SubscriptionState
from .types import ErrorAction, PollResult, Request

log = logging.getLogger("kwire.consumer.fetcher")

TP = tuple[str, int]  # (topic, partition)
# what a Fetch asks of one partition: (fetch offset, current leader epoch, last fetched epoch,
# partition max bytes)
PartData = tuple[int, int, int, int]
INITIAL_EPOCH = 0
INT32_MAX = 2**31 - 1
CONSUMER_REPLICA_ID = -1
_SESSION_ERRORS = {E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH,
                   E.FETCH_SESSION_TOPIC_ID_ERROR}
_METADATA_ERRORS = {E.NOT_LEADER_OR_FOLLOWER, E.REPLICA_NOT_AVAILABLE, E.KAFKA_STORAGE_ERROR,
                    E.FENCED_LEADER_EPOCH, E.OFFSET_NOT_AVAILABLE, E.UNKNOWN_TOPIC_OR_PARTITION,
                    E.UNKNOWN_TOPIC_ID, E.INCONSISTENT_TOPIC_ID, E.LEADER_NOT_AVAILABLE,
                    E.UNKNOWN_LEADER_EPOCH}


class FetchSession:
    """The client half of one broker's incremental fetch session (KIP-227)."""

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TP, PartData] = {}  # what the broker's session holds for us
        self.topic_ids: bool | None = None     # does the session name topics by id?
        self._pending: dict[TP, PartData] | None = None

    def build(self, wanted: dict[TP, PartData], *, topic_ids: bool, sessions: bool
              ) -> tuple[dict[TP, PartData], list[TP], int, int]:
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


def scan_record_set(data: Any, until_damage: bool = True) -> list[Any]:
    """The spans (kwire.records.scan_spans) of a Fetch answer's record set; by default up to
    any damage, which the decoding then reports with the records before it."""
    spans: list[Any] = _records_module().scan_spans(data, until_damage=until_damage)
    return spans


def decode_records(iter_records: Callable[..., Any], data: Any, fetch_offset: int, *, topic: str,
                   partition: int, aborted: list[dict[str, Any]] | None, read_committed: bool,
                   check_crc: bool) -> list[Any]:
    """The user records at or after ``fetch_offset`` (aborted transactions dropped under
    read_committed)."""
    return decode_partition(iter_records, data, fetch_offset, topic=topic, partition=partition,
                            aborted=aborted, read_committed=read_committed, check_crc=check_crc)[0]


def decode_partition(iter_records: Callable[..., Any], data: Any, fetch_offset: int, *, topic: str,
                     partition: int, aborted: list[dict[str, Any]] | None, read_committed: bool,
                     check_crc: bool) -> tuple[list[Any], int, int | None]:
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
    def __init__(self, subscriptions: SubscriptionState, metadata: Any, *, fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int | None = None, buffer_budget_bytes: int = 64 << 20,
                 read_committed: bool = True, check_crcs: bool = False, client_rack: str | None = None,
                 retry_backoff_ms: int = 100, request_timeout_ms: int = 30000,
                 iter_records: Callable[..., Any] | None = None,
                 scan: Callable[..., list[Any]] = scan_record_set,
                 max_decompressed_bytes: int | None = None):
        self.subs = subscriptions
        self.metadata = metadata
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        # None: max.partition.fetch.bytes not given -- each node's partitions share an answer of
        # answer_bytes (see fetch_answer_bytes), at least 1 MiB each
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.answer_bytes = fetch_answer_bytes(buffer_budget_bytes, fetch_max_bytes, max_partition_fetch_bytes)
        self.read_committed = read_committed
        self.check_crcs = check_crcs
        self.client_rack = client_rack or ""
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        worker_ahead_bytes = 0
        if iter_records is None:
            worker_ahead_bytes = min(WORKER_AHEAD_BYTES, buffer_budget_bytes // 8)
            iter_records = partial(_records_module().iter_records, max_ahead_bytes=worker_ahead_bytes)
        if max_decompressed_bytes is not None:
            # fetch.max.decompressed.bytes: a batch expanding past it is a DecompressionLimitError
            # (a CorruptRecordError), reported like any corrupt record set (see decode_piece())
            iter_records = partial(iter_records, max_decompressed_bytes=max_decompressed_bytes)
        self._scan = scan
        self._iter_records = iter_records
        # the memory budget, and decoding raw chunks into pieces (fetch_buffer.py)
        self.buffer = FetchBuffer(buffer_budget_bytes, worker_ahead_bytes=worker_ahead_bytes)
        self._corrupt: set[TP] = set()  # damaged record sets: fetched again after a backoff
        self.sessions: dict[int, FetchSession] = {}
        self.inflight: dict[int, Request] = {}
        self._backoff_until: dict[TP, int] = {}
        self._node_backoff_until: dict[int, int] = {}
        self._garbled_nodes: set[int] = set()  # nodes whose last answer could not be read (reported)
        self._actions: list[ErrorAction] = []
        self.starved = False  # True while the buffer budget keeps us from fetching

    def make_decoder(self, budget: Budget, on_failed: OnFailed) -> ChunkDecoder:
        """A decoder of this fetcher's raw chunks (the record layer's iterator with this
        consumer's settings) that counts in ``budget`` and reports damage to ``on_failed``."""
        return ChunkDecoder(budget, self._iter_records, self._scan, on_failed=on_failed,
                            read_committed=self.read_committed, check_crcs=self.check_crcs)

    def on_decode_failed(self, tp: TP, fence: int, resume_offset: int) -> None:
        """A raw chunk of ``tp`` fetched under ``fence`` could not be decoded past
        ``resume_offset``: fetch it again from there (unless the position moved since: a seek
        or a revocation made the chunk stale), after a backoff."""
        st = self.subs.get(tp)
        if st is not None and st.fence == fence and st.position is not None:
            self.subs.seek(tp, resume_offset)
        self._corrupt.add(tp)

    def drain_actions(self) -> list[ErrorAction]:
        out, self._actions = self._actions, []
        return out

    # --- poll ----------------------------------------------------------------------------------

    def _partition_data(self, tp: TP, max_bytes: int) -> PartData:
        st = self.subs.state(tp)
        pos = st.position
        assert pos is not None  # (fetchable: it has a position)
        p = self.metadata.partition(tp[0], tp[1])
        leader_epoch = p.leader_epoch if p is not None and p.leader_epoch is not None else -1
        last_epoch = pos.offset_epoch if pos.offset_epoch is not None else -1
        return (pos.offset, leader_epoch, last_epoch, max_bytes)

    def poll(self, now_ms: int) -> PollResult:
        return PollResult(self._fetches(now_ms), self._backoff_end_ms())

    def _fetches(self, now_ms: int) -> list[Request]:
        out: list[Request] = []
        for tp in [k for k, t in self._backoff_until.items() if t <= now_ms]:
            del self._backoff_until[tp]
        for node in [k for k, t in self._node_backoff_until.items() if t <= now_ms]:
            del self._node_backoff_until[node]
        fetchable = self.subs.fetchable()
        if not fetchable:
            self.starved = False
            return out
        failed = self._corrupt
        if failed:  # corrupt data: try again, but not in a hot loop
            for tp in failed:
                self._backoff_until[tp] = now_ms + self.retry_backoff_ms
            failed.clear()
        used = self.buffer.full_bytes()
        budget = self.buffer.budget_bytes
        if used >= budget:
            self.starved = True
            return out
        leaders = {tp: self.metadata.leader_for(tp[0], tp[1]) for tp in fetchable}
        per_node = Counter(leaders.values())
        fixed = self.max_partition_fetch_bytes
        room = self.buffer.raw_room_bytes()
        share = max(room // max(1, len(fetchable)), fixed or PARTITION_FETCH_BYTES)
        buffered = self.buffer.buffered
        by_node: dict[int, dict[TP, PartData]] = {}
        held_back: set[int | None] = set()  # nodes leading a partition skipped for want of room
        for tp in fetchable:
            node = leaders[tp]
            if buffered.get(tp, 0) >= share:
                held_back.add(node)
                continue
            if tp in self._backoff_until:
                continue
            if node is None:
                self.metadata.request_update()
                continue
            pmax = fixed or partition_fetch_bytes(self.answer_bytes, per_node[node])
            by_node.setdefault(node, {})[tp] = self._partition_data(tp, pmax)
        self.starved = bool(held_back)
        free = budget - used
        for node, wanted in by_node.items():
            if node in self.inflight or now_ms < self._node_backoff_until.get(node, 0):
                continue
            if node in held_back and all(self._at_end(tp) for tp in wanted):
                # Every partition we would ask for is at its end, so the broker would hold the
                # answer for fetch.wait.max.ms -- and with it the node's one Fetch, while a
                # partition of the same node that is behind waits here only for room.  Wait
                # for that room instead (the application wakes us when it frees some) and ask
                # for all of them then.
                continue
            out.append(self._request(node, wanted, min(self.answer_bytes, max(free, 1))))
        return out

    def _at_end(self, tp: TP) -> bool:
        """The position is at the end the broker would answer up to (the last stable offset
        under read_committed, else -- or when the broker gave none -- the high watermark), as
        of the last answer."""
        st = self.subs.get(tp)
        if st is None or st.position is None:
            return False
        end = st.high_watermark
        if self.read_committed and st.last_stable_offset >= 0:
            end = st.last_stable_offset
        return 0 <= end <= st.position.offset

    def _backoff_end_ms(self) -> int | None:
        """The end of the earliest backoff (poll() drops expired ones, so this is ahead)."""
        ds = list(self._backoff_until.values()) + list(self._node_backoff_until.values())
        return min(ds) if ds else None

    def _request(self, node: int, wanted: dict[TP, PartData], max_bytes: int) -> Request:
        session = self.sessions.get(node)
        if session is None:
            session = self.sessions[node] = FetchSession(node)
        ids = {t: self.metadata.topic_id(t) for t in {tp[0] for tp in wanted}}
        all_ids = all(v is not None and v != ZERO_UUID for v in ids.values())
        fetched_offsets = {tp: d[0] for tp, d in wanted.items()}
        leader_epochs = {tp: d[1] for tp, d in wanted.items()}
        context: dict[str, Any] = {"node": node, "offsets": fetched_offsets,
                                   "leader_epochs": leader_epochs, "id_to_name": {}, "sent": False}

        def build(version: int) -> dict[str, Any]:
            use_ids = version >= 13
            send, forget, session_id, epoch = session.build(
                wanted, topic_ids=use_ids, sessions=version >= 7)
            context["sent"] = True
            context["id_to_name"] = {v: k for k, v in ids.items() if v is not None}
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), (offset, leader_epoch, last_epoch, pmax) in sorted(send.items()):
                topics.setdefault(topic, []).append({
                    "partition": partition, "current_leader_epoch": leader_epoch,
                    "fetch_offset": offset, "last_fetched_epoch": last_epoch,
                    "log_start_offset": -1, "partition_max_bytes": pmax})
            forgotten: dict[str, list[int]] = {}
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

    def _first_entry_damaged(self, tp: TP, data: Any, fetched_offset: int, now_ms: int) -> None:
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

    def on_response(self, request: Request, resp: Any, now_ms: int) -> list[FetchedChunk]:
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

    def _partition(self, tp: TP, fetched_offset: int | None, leader_epoch: int | None, p: dict[str, Any],
                   now_ms: int) -> FetchedChunk | None:
        st = self.subs.get(tp)
        if st is None or not st.fetchable or fetched_offset is None or st.position is None \
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
            self.buffer.add_raw(tp, nbytes)
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
