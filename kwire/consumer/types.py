"""Values shared by the consumer's state machines and its public API.

* :class:`TopicPartition` -- the public (confluent-kafka shaped) partition handle.  Inside the
  state machines a partition is the plain tuple ``(topic, partition)`` ("tp"): cheaper to hash,
  and immutable.
* :class:`Request` -- what a state machine asks its driver to send: which node, which API, and
  a body builder that receives the version the driver negotiated.  State machines never touch
  a socket; the driver sends, and hands the response (or the exception) back to the machine
  that asked.
* Actions -- what a state machine asks the *application* to do or to learn (rebalance
  callbacks, commit results, errors).  The driver delivers them in order with the records.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

# Special offsets, as confluent-kafka spells them.
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

# ListOffsets timestamps with special meaning.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

NO_LEADER_EPOCH = -1

TP = tuple[str, int]  # (topic, partition) -- the internal partition key


class TopicPartition:
    """A topic partition, optionally with an offset, commit metadata and leader epoch.

    Compares and hashes by ``(topic, partition)`` only, as confluent-kafka's does, so it can key
    dicts whatever its offset.
    """

    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch", "error")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID,
                 metadata: str | None = None, leader_epoch: int | None = None,
                 error: BaseException | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error = error

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self.topic == other.topic and self.partition == other.partition

    def __lt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __repr__(self) -> str:
        extra = ""
        if self.leader_epoch is not None:
            extra += f", leader_epoch={self.leader_epoch}"
        if self.metadata is not None:
            extra += f", metadata={self.metadata!r}"
        if self.error is not None:
            extra += f", error={self.error!r}"
        return f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset}{extra}}}"

    __str__ = __repr__


class OffsetAndMetadata(NamedTuple):
    """An offset to commit (or committed): the next offset to read, its record's leader epoch
    (``None`` when unknown) and the commit's metadata string."""

    offset: int
    leader_epoch: int | None = None
    metadata: str | None = ""


class GroupMetadata(NamedTuple):
    """What a transactional producer's send_offsets_to_transaction() needs of a consumer's
    group membership (TxnOffsetCommit's fields): the group id, the generation (classic) or
    member epoch (KIP-848), the member id and group.instance.id.  The broker fences offsets
    sent for a generation that has ended."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# --- requests --------------------------------------------------------------------------------

COORDINATOR = "coordinator"  # Request.node: the group coordinator, whichever broker it is,
#                              over the group's own connection (membership: Join/Sync/Heartbeat/Leave)
COORDINATOR_BROKER = "coordinator-broker"  # the coordinator's broker over its ordinary connection:
#   offset commits and look-ups, which must not wait behind a JoinGroup the broker holds for a
#   rebalance (a broker answers one connection's requests in order)


class Request:
    """One request a state machine wants sent.

    ``node``: a broker id, :data:`COORDINATOR` / :data:`COORDINATOR_BROKER`, or ``None`` for any
    broker.  ``build(version)``
    returns the body for the version the driver negotiated (bodies may be supersets: the encoder
    ignores keys a version lacks).  ``max_version`` caps the negotiation when the body cannot be
    expressed in newer versions (e.g. Fetch v13+ needs topic ids).  ``version`` is recorded when
    the body is built, so the response handler knows which layout it got.
    """

    def __init__(self, node: int | str | None, api: str, build: Callable[[int], dict[str, Any]], *,
                 max_version: int | None = None, min_version: int | None = None,
                 timeout_ms: int | None = None, context: Any = None, owner: Any = None):
        self.node = node
        self.api = api
        self._build = build
        self.max_version = max_version
        self.min_version = min_version
        self.timeout_ms = timeout_ms
        self.context = context
        self.owner = owner
        self.version: int | None = None

    def body(self, version: int) -> dict[str, Any]:
        """The body at ``version`` (the driver passes this method as the body callable)."""
        self.version = version
        return self._build(version)

    def __repr__(self) -> str:
        return f"Request({self.api} -> {self.node!r}, v={self.version})"


@dataclass(frozen=True, slots=True)
class PollResult:
    """One poll's answer (Kafka's Java request managers return the same pair): what to send
    now, and when to poll again if no response comes first (None: only a response or a call
    from the application can change things; a time at or before now: at once)."""
    requests: list[Request]
    next_deadline_ms: int | None


class StateMachine(Protocol):
    """What the consumer's driver runs (ClassicGroupMember / ConsumerGroupMember,
    PositionManager, Fetcher): a machine that does no I/O.  ``poll`` acts on the time and
    answers with one :class:`PollResult`; ``on_response`` takes a response (or the exception
    its request failed with); ``drain_actions`` hands over what the application must hear."""

    def poll(self, now_ms: int) -> PollResult: ...

    def on_response(self, request: Request, response: Any, now_ms: int) -> Any: ...

    def drain_actions(self) -> list[Any]: ...


# --- actions (state machine -> application) -------------------------------------------------

@dataclass
class Action:
    pass


@dataclass
class AssignPartitions(Action):
    """Partitions added to this member's assignment: call on_assign."""
    partitions: list[TP]
    incremental: bool = False


@dataclass
class RevokePartitions(Action):
    """Partitions leaving this member's assignment: call on_revoke, then ack (the coordinator
    waits for the ack before committing and rejoining)."""
    partitions: list[TP]
    incremental: bool = False
    ack_id: int = 0


@dataclass
class LosePartitions(Action):
    """Partitions this member no longer owns (membership lost): call on_lost (or on_revoke)."""
    partitions: list[TP]
    incremental: bool = False


@dataclass
class CommitResult(Action):
    """Outcome of one commit: ``error`` is None on success."""
    offsets: dict[TP, OffsetAndMetadata]
    error: BaseException | None
    token: Any = None
    user: bool = True  # False for auto-commits (still reported to on_commit)


@dataclass
class CommittedResult(Action):
    """Outcome of a committed() query."""
    offsets: dict[TP, Any]
    error: BaseException | None
    token: Any = None


@dataclass
class ErrorAction(Action):
    """An error the application should see (raised from poll/consume or passed to error_cb)."""
    error: BaseException
    fatal: bool = False
    partitions: list[TP] = field(default_factory=list)
