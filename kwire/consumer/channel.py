"""What the consumer's two threads share (:class:`Channel`) and say to each other: the
application's commands (frozen dataclasses, applied by the driver in order) and the driver's
events (besides the state machines' actions), and the :class:`Future` a command is answered
through.  Data only: the driver is :mod:`.driver`, the application's side :mod:`.consumer`."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..errors import KafkaTimeoutError
from .fetch_buffer import FetchedChunk
from .types import OFFSET_BEGINNING, OFFSET_END, AssignPartitions, LosePartitions, RevokePartitions

CLOSE_TIMEOUT_MS = 15000

TP = tuple[str, int]
Consumed = dict[TP, tuple[int, "int | None", int]]  # tp -> (next offset, leader epoch, fence)


class Future:
    """The answer to a command, set by the driver, waited for by the application."""
    __slots__ = ("_event", "value", "error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self._event.set()

    def wait(self, timeout_s: float | None) -> Any:
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError("the operation did not complete within the timeout")
        if self.error is not None:
            raise self.error
        return self.value


def moves_position(offset: int | None) -> bool:
    """Whether an offset given with a partition to assign() sets where it is fetched from (an
    offset, OFFSET_BEGINNING or OFFSET_END) rather than leaving that to the committed offset or
    auto.offset.reset (None, OFFSET_INVALID, OFFSET_STORED).  Both threads decide with this
    which partitions an Assign moves: the application raises their fences before it posts the
    command, the driver answers each with a SeekDone."""
    return offset is not None and (offset >= 0 or offset in (OFFSET_BEGINNING, OFFSET_END))


# --- commands: application -> driver ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: list[str]
    fut: Future


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    consumed: Consumed
    fut: Future


@dataclass(frozen=True, slots=True)
class Assign:
    """Manual assignment (or, inside on_assign, the offsets to start the group's partitions at):
    ``parts`` [(topic, partition, offset or None, leader epoch or None)]."""
    parts: list[tuple[str, int, int | None, int | None]]
    incremental: bool
    fut: Future


@dataclass(frozen=True, slots=True)
class Unassign:
    tps: list[TP] | None  # None: all
    fut: Future


@dataclass(frozen=True, slots=True)
class Seek:
    tp: TP
    offset: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class Pause:
    items: list[tuple[TP, tuple[int, int | None] | None]]  # (tp, the application's position: offset, epoch)


@dataclass(frozen=True, slots=True)
class Resume:
    tps: list[TP]


@dataclass(frozen=True, slots=True)
class Commit:
    offsets: dict[TP, Any]  # tp -> OffsetAndMetadata
    fut: Future | None  # None: asynchronous, the result goes to on_commit only


@dataclass(frozen=True, slots=True)
class FetchCommitted:
    tps: list[TP]
    fut: Future
    timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class ListOffsets:
    timestamps: dict[TP, int]
    fut: Future
    timeout_ms: int | None
    isolation: int


@dataclass(frozen=True, slots=True)
class AckRevoke:
    """on_revoke returned: ``consumed`` the positions to commit before the partitions go."""
    ack_id: int
    consumed: Consumed


@dataclass(frozen=True, slots=True)
class DecodeFailed:
    """A raw chunk of ``tp`` fetched under ``fence`` was damaged after ``resume_offset`` (the
    records before went to the application): fetch the partition again from there."""
    tp: TP
    fence: int
    resume_offset: int


@dataclass(frozen=True, slots=True)
class Positions:
    tps: list[TP]
    fut: Future


@dataclass(frozen=True, slots=True)
class Watermarks:
    tp: TP
    fut: Future


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    topic: str | None
    fut: Future
    timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class Close:
    consumed: Consumed
    fut: Future


@dataclass(frozen=True, slots=True)
class Stop:
    """End the driver's loop at once (the consumer is being collected)."""


Command = (Subscribe | Unsubscribe | Assign | Unassign | Seek | Pause | Resume | Commit
           | FetchCommitted | ListOffsets | AckRevoke | DecodeFailed | Positions | Watermarks
           | FetchMetadata | Close | Stop)


# --- events: driver -> application (besides the state machines' actions) ----------------------------

@dataclass(frozen=True, slots=True)
class SeekDone:
    tp: TP
    fence: int


@dataclass(frozen=True, slots=True)
class AssignmentChanged:
    """Manual assignment changed: ``added`` {tp: created fence}, ``removed`` [tp]."""
    added: dict[TP, int]
    removed: list[TP]


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """A coordinator action with the fences the application needs."""
    action: AssignPartitions | RevokePartitions | LosePartitions
    fences: dict[TP, int]


@dataclass(frozen=True, slots=True, repr=False)
class PartitionEOF:
    """``enable.partition.eof``: the application has had every record of ``topic`` [``partition``]
    before ``offset``, the partition's high watermark when it was fetched.  poll() returns it
    (consume() returns it alone in its list), once per end reached: again only after more
    records, a seek or a new assignment."""
    topic: str
    partition: int
    offset: int
    fence: int

    def __repr__(self) -> str:
        return f"PartitionEOF({self.topic} [{self.partition}] at {self.offset})"


class Channel:
    """What the two threads share.  Deques (thread-safe append/popleft) carry the traffic; every
    other field has one writer."""

    def __init__(self) -> None:
        self.q: deque[Any] = deque()           # driver -> app: raw chunks and events, in fetch order
        self.urgent: deque[Any] = deque()      # driver -> app: group events, ahead of the chunks
        self.cmds: deque[Command] = deque()  # app -> driver
        self.released: deque[FetchedChunk] = deque()  # app -> driver: raw chunks it is done with
        self.cond = threading.Condition()  # the driver notifies a waiting application
        self.app_waiting = False          # app writes: waiting on cond for the queue
        self.in_poll = False              # app writes: blocked inside poll/consume/close
        self.closing = False              # app writes: close() has begun
        self.last_poll_ms = 0             # app writes
        self.consumed: Consumed = {}      # app writes: what the application has consumed
        self.consumed_ver = 0             # app writes: bumped when `consumed` changed
        self.driver_error: BaseException | None = None  # driver writes: it stopped on this
        self.driver_done = threading.Event()            # driver sets: its loop ended
