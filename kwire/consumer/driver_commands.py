"""How the driver applies the application's commands (see :mod:`.channel`): one ``match``
over the command types, each handled on the driver thread against the machines it owns."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import KwireError
from ..net.metadata import Metadata
from .channel import (
    CLOSE_TIMEOUT_MS,
    TP,
    AckRevoke,
    Assign,
    AssignmentChanged,
    Channel,
    Close,
    Commit,
    Consumed,
    DecodeFailed,
    FetchCommitted,
    FetchMetadata,
    Future,
    ListOffsets,
    Pause,
    Positions,
    Resume,
    Seek,
    SeekDone,
    Stop,
    Subscribe,
    Unassign,
    Unsubscribe,
    Watermarks,
    moves_position,
)
from .coordinator import GroupCoordinator
from .fetcher import Fetcher
from .offsets import PositionManager
from .subscription import FetchState, ResetStrategy, SubscriptionState
from .types import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, ErrorAction


class CommandHandlers:
    """The driver's handling of commands (a part of :class:`~kwire.consumer.driver.Driver`)."""

    _ch: Channel
    _subs: SubscriptionState
    _md: Metadata
    _coord: GroupCoordinator
    _positions: PositionManager
    _fetcher: Fetcher
    _net: Any
    _inflight: dict[Any, Any]
    _clock: Callable[[], int]
    _close_future: Future | None
    _close_deadline_ms: int | None

    def _push(self, item: Any) -> None:
        raise NotImplementedError  # (the Driver's)

    def _apply_commands(self, now: int) -> bool:
        """Apply the application's commands in order; True on Stop."""
        cmds = self._ch.cmds
        while cmds:
            cmd = cmds.popleft()
            try:
                match cmd:
                    case Stop():
                        return True
                    case Subscribe():
                        self._subscribe(cmd)
                    case Unsubscribe():
                        self._mark(cmd.consumed)
                        if self._subs.is_auto:
                            self._coord.leave(now, revoke=False)
                        cmd.fut.set(None)
                    case Assign():
                        self._assign(cmd)
                    case Unassign():
                        self._unassign(cmd)
                    case Seek():
                        if cmd.tp in self._subs:
                            self._apply_offset(cmd.tp, cmd.offset, cmd.leader_epoch)
                            self._push(SeekDone(cmd.tp, self._subs.state(cmd.tp).fence))
                    case Pause():
                        self._pause(cmd)
                    case Resume():
                        self._subs.resume(cmd.tps)
                    case Commit():
                        self._coord.commit(cmd.offsets, now, token=cmd.fut)
                    case FetchCommitted():
                        self._coord.fetch_committed(cmd.tps, now, token=cmd.fut,
                                                    timeout_ms=cmd.timeout_ms)
                    case ListOffsets():
                        self._md.add_topics({t for t, _ in cmd.timestamps})
                        self._positions.list_offsets(cmd.timestamps, now, token=cmd.fut,
                                                     timeout_ms=cmd.timeout_ms,
                                                     isolation_level=cmd.isolation)
                    case AckRevoke():
                        self._mark(cmd.consumed)
                        self._coord.ack_revoke(cmd.ack_id, now)
                    case DecodeFailed():
                        self._fetcher.on_decode_failed(cmd.tp, cmd.fence, cmd.resume_offset)
                    case Positions():
                        cmd.fut.set(self._positions_of(cmd.tps))
                    case Watermarks():
                        cmd.fut.set(self._watermarks(cmd.tp))
                    case FetchMetadata():
                        self._fetch_metadata(cmd)
                    case Close():
                        self._mark(cmd.consumed)
                        self._coord.leave(now, revoke=False, close=True)
                        self._close_future = cmd.fut
                        self._close_deadline_ms = now + CLOSE_TIMEOUT_MS
            except Exception as exc:
                fut = getattr(cmd, "fut", None)
                if fut is not None:
                    fut.set(error=exc)
                else:
                    self._push(ErrorAction(exc))
        return False

    def _mark(self, consumed: Consumed) -> None:
        for tp, (off, ep, fence) in consumed.items():
            self._subs.mark_consumed(tp, off, ep, fence=fence)

    def _subscribe(self, cmd: Subscribe) -> None:
        topics = cmd.topics
        changed = self._subs.subscribe(topics)
        if self._subs.is_pattern:
            self._md.want_all_topics()
        self._md.add_topics([t for t in topics if not t.startswith("^")])
        self._md.request_update()
        if changed:
            self._coord.on_subscription_changed()
        cmd.fut.set(None)

    def _assign(self, cmd: Assign) -> None:
        subs = self._subs
        parts = cmd.parts
        tps = [(t, p) for t, p, _, _ in parts]
        if subs.is_auto:
            # inside on_assign: the group decided the partitions; apply the offsets given.  A
            # partition moved is a seek: records fetched before it (the driver may have reset
            # and fetched it while on_assign waited its turn) must not reach the application.
            for t, p, off, ep in parts:
                self._moved((t, p), off, ep)
            cmd.fut.set(None)
            return
        old = set(subs.assigned())
        new = list(dict.fromkeys((list(subs.assigned()) if cmd.incremental else []) + tps))
        subs.assign_manual(new)
        self._md.add_topics({t for t, _ in new})
        for t, p, off, ep in parts:
            if (t, p) in old:
                self._moved((t, p), off, ep)  # assigned already: as a seek
            else:
                self._apply_offset((t, p), off, ep)
        added = {tp: subs.state(tp).created_fence for tp in new if tp not in old}
        removed = [tp for tp in old if tp not in set(new)]
        self._push(AssignmentChanged(added, removed))
        cmd.fut.set(None)

    def _moved(self, tp: TP, offset: int | None, leader_epoch: int | None) -> None:
        """An assigned partition's new position from assign(): a SeekDone with its new fence
        follows, for the application raised its fence when it asked (see moves_position)."""
        if self._apply_offset(tp, offset, leader_epoch):
            self._push(SeekDone(tp, self._subs.state(tp).fence))

    def _apply_offset(self, tp: TP, offset: int | None, leader_epoch: int | None) -> bool:
        """Position ``tp`` as given; True if it moved (else the committed offset or the reset
        policy decides)."""
        if tp not in self._subs or offset is None or not moves_position(offset):
            return False
        if offset == OFFSET_BEGINNING:
            self._subs.request_reset(tp, ResetStrategy.EARLIEST)
        elif offset == OFFSET_END:
            self._subs.request_reset(tp, ResetStrategy.LATEST)
        else:
            self._subs.seek(tp, offset, leader_epoch)
        return True

    def _unassign(self, cmd: Unassign) -> None:
        subs = self._subs
        if subs.is_auto:
            raise KwireError("unassign() while subscribed: use unsubscribe()")
        old = subs.assigned()
        keep = [] if cmd.tps is None else [tp for tp in old if tp not in set(cmd.tps)]
        subs.assign_manual(keep)
        self._push(AssignmentChanged({}, [tp for tp in old if tp not in set(keep)]))
        cmd.fut.set(None)

    def _pause(self, cmd: Pause) -> None:
        subs = self._subs
        for tp, app_pos in cmd.items:
            st = subs.get(tp)
            if st is None:
                continue
            st.paused = True
            if st.state is FetchState.FETCHING:
                # rewind to what the application has seen: buffered records are dropped
                offset = app_pos[0] if app_pos is not None else st.fence_offset
                if offset is not None:
                    subs.seek(tp, offset)
                    if app_pos is not None and app_pos[1] is not None and st.position is not None:
                        st.position = st.position._replace(offset_epoch=app_pos[1])
            self._push(SeekDone(tp, st.fence))

    def _positions_of(self, tps: list[TP]) -> dict[TP, tuple[int, int | None]]:
        out = {}
        for tp in tps:
            st = self._subs.get(tp)
            if st is not None and st.state is FetchState.FETCHING and st.fence_offset is not None:
                out[tp] = (st.fence_offset, st.position.offset_epoch if st.position else None)
        return out

    def _watermarks(self, tp: TP) -> tuple[int, int]:
        st = self._subs.get(tp)
        if st is None:
            return (OFFSET_INVALID, OFFSET_INVALID)
        return (st.log_start_offset if st.log_start_offset >= 0 else OFFSET_INVALID,
                st.high_watermark if st.high_watermark >= 0 else OFFSET_INVALID)

    def _fetch_metadata(self, cmd: FetchMetadata) -> None:
        names = None if cmd.topic is None else [cmd.topic]
        md = Metadata()
        fut = cmd.fut

        def done(f: Any) -> None:
            if f.error is not None:
                fut.set(error=f.error)
                return
            md.update(f.response, self._clock(), all_topics=True)
            fut.set(md.snapshot())

        f = self._net.send(None, "Metadata", lambda v: md.request_body(v, names),
                           timeout_ms=cmd.timeout_ms)
        self._inflight[f] = done
