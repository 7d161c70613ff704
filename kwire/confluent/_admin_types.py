"""The value types of confluent-kafka's AdminClient calls (same names, constructors, enum
numbers and attributes), written for kwire.confluent; confluent_kafka exports some of them at
the top level (Node, ConsumerGroupTopicPartitions, ConsumerGroupState, ConsumerGroupType,
IsolationLevel, TopicCollection, TopicPartitionInfo), the others from ``admin``."""
from __future__ import annotations

import functools
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    import uuid as _uuid

__all__ = ["ResourceType", "ConfigSource", "AlterConfigOpType", "ConfigEntry", "ConfigResource",
           "NewPartitions", "ConsumerGroupState", "ConsumerGroupType", "IsolationLevel", "Node",
           "ConsumerGroupTopicPartitions", "ConsumerGroupListing", "ListConsumerGroupsResult",
           "MemberAssignment", "MemberDescription", "ConsumerGroupDescription", "OffsetSpec",
           "ListOffsetsResultInfo", "DescribeClusterResult", "TopicCollection",
           "TopicPartitionInfo", "TopicDescription", "Uuid", "AclOperation"]


class ResourceType(Enum):
    """librdkafka's numbering (not the wire's: GROUP is 32 there)."""
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    TRANSACTIONAL_ID = 5

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ResourceType):
            return NotImplemented
        return bool(self.value < other.value)


WIRE_RESOURCE = {ResourceType.TOPIC: 2, ResourceType.GROUP: 32, ResourceType.BROKER: 4}
FROM_WIRE_RESOURCE = {v: k for k, v in WIRE_RESOURCE.items()}


class ConfigSource(Enum):
    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, wire: int) -> ConfigSource:
        try:
            return cls(wire)
        except ValueError:
            return cls.UNKNOWN_CONFIG


class AlterConfigOpType(Enum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigEntry:
    """One configuration property: described (describe_configs; ``source`` is then the broker's
    number, an int, as confluent-kafka gives it) or to alter (``incremental_operation`` for
    incremental_alter_configs)."""

    def __init__(self, name: str, value: str | None,
                 source: ConfigSource | int = ConfigSource.UNKNOWN_CONFIG,
                 is_read_only: bool = False, is_default: bool = False, is_sensitive: bool = False,
                 is_synonym: bool = False, synonyms: dict[str, ConfigEntry] | None = None,
                 incremental_operation: AlterConfigOpType | None = None) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.is_read_only = bool(is_read_only)
        self.is_default = bool(is_default)
        self.is_sensitive = bool(is_sensitive)
        self.is_synonym = bool(is_synonym)
        self.synonyms = synonyms if synonyms is not None else {}
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f'ConfigEntry({self.name}="{self.value}")'

    def __str__(self) -> str:
        return f'{self.name}="{self.value}"'


@functools.total_ordering
class ConfigResource:
    """A resource with configuration: ``ConfigResource(ResourceType.TOPIC | "topic" | 2, name,
    set_config=None, incremental_configs=None)``."""

    Type = ResourceType

    def __init__(self, restype: ResourceType | str | int, name: str,
                 set_config: dict[str, str] | None = None,
                 described_configs: dict[str, ConfigEntry] | None = None, error: Any = None,
                 incremental_configs: list[ConfigEntry] | None = None) -> None:
        if name is None:
            raise ValueError("Expected resource name to be a string")
        if isinstance(restype, str):
            try:
                restype = ResourceType[restype.upper()]
            except KeyError:
                raise ValueError(f'Unknown resource type "{restype}": should be a ConfigResource.Type') from None
        elif isinstance(restype, int):
            restype = ResourceType(restype)
        self.restype = restype
        self.restype_int = int(restype.value)
        self.name = name
        self.set_config_dict = dict(set_config) if set_config is not None else {}
        self.incremental_configs = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"ConfigResource({self.restype},{self.name},{self.error!r})"
        return f"ConfigResource({self.restype},{self.name})"

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __lt__(self, other: ConfigResource) -> bool:
        if self.restype.__lt__(other.restype):
            return True
        return self.name.__lt__(other.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return self.restype == other.restype and self.name == other.name

    def __len__(self) -> int:
        return len(self.set_config_dict)

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        if not overwrite and name in self.set_config_dict:
            return
        self.set_config_dict[name] = value

    def add_incremental_config(self, config_entry: ConfigEntry) -> None:
        self.incremental_configs.append(config_entry)


@functools.total_ordering
class NewPartitions:
    """``NewPartitions(topic, new_total_count, replica_assignment=None)``."""

    def __init__(self, topic: str, new_total_count: int,
                 replica_assignment: list[list[int]] | None = None) -> None:
        if not isinstance(topic, str):
            raise TypeError("topic must be a str")
        self.topic = topic
        self.new_total_count = int(new_total_count)
        self.replica_assignment = replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic},new_total_count={self.new_total_count})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NewPartitions) and self.topic == other.topic

    def __lt__(self, other: NewPartitions) -> bool:
        return self.topic < other.topic

    def __hash__(self) -> int:
        return hash(self.topic)


class _Ordered(Enum):
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, self.__class__):
            return NotImplemented
        return bool(self.value < other.value)


class ConsumerGroupState(_Ordered):
    UNKNOWN = 0
    UNKOWN = 0  # (confluent-kafka's old misspelling, an alias)
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5

    @classmethod
    def of(cls, broker_state: str) -> ConsumerGroupState:
        """From the broker's name of the state ("Stable", "PreparingRebalance", ...)."""
        return _STATES.get((broker_state or "").lower(), cls.UNKNOWN)


_STATES = {"preparingrebalance": ConsumerGroupState.PREPARING_REBALANCING,
           "completingrebalance": ConsumerGroupState.COMPLETING_REBALANCING,
           "stable": ConsumerGroupState.STABLE, "dead": ConsumerGroupState.DEAD,
           "empty": ConsumerGroupState.EMPTY}
BROKER_STATE = {ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
                ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
                ConsumerGroupState.STABLE: "Stable", ConsumerGroupState.DEAD: "Dead",
                ConsumerGroupState.EMPTY: "Empty", ConsumerGroupState.UNKNOWN: "Unknown"}


class ConsumerGroupType(_Ordered):
    UNKNOWN = 0
    CONSUMER = 1
    CLASSIC = 2

    @classmethod
    def of(cls, broker_type: str) -> ConsumerGroupType:
        return {"consumer": cls.CONSUMER, "classic": cls.CLASSIC}.get((broker_type or "").lower(),
                                                                      cls.UNKNOWN)


class IsolationLevel(_Ordered):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


_E = TypeVar("_E", bound=Enum)


def _enum(value: object, cls: type[_E]) -> _E | None:
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, str):
        return cls[value.upper()]
    return cls(value)


class Node:
    def __init__(self, id: int, host: str, port: int, rack: str | None = None) -> None:
        self.id = id
        self.id_string = str(id)
        self.host = host
        self.port = port
        self.rack = rack

    def __str__(self) -> str:
        return f"({self.id}) {self.host}:{self.port} {f'(Rack - {self.rack})' if self.rack else ''}"


class ConsumerGroupTopicPartitions:
    def __init__(self, group_id: str, topic_partitions: list[Any] | None = None) -> None:
        self.group_id = group_id
        self.topic_partitions = topic_partitions


class ConsumerGroupListing:
    def __init__(self, group_id: str, is_simple_consumer_group: bool, state: object = None,
                 type: object = None) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        if state is not None:
            self.state = _enum(state, ConsumerGroupState)
        if type is not None:
            self.type = _enum(type, ConsumerGroupType)


class ListConsumerGroupsResult:
    def __init__(self, valid: list[ConsumerGroupListing] | None = None,
                 errors: list[Any] | None = None) -> None:
        self.valid = valid
        self.errors = errors


class MemberAssignment:
    def __init__(self, topic_partitions: list[Any] | None) -> None:
        self.topic_partitions = topic_partitions or []


class MemberDescription:
    def __init__(self, member_id: str, client_id: str, host: str, assignment: MemberAssignment,
                 group_instance_id: str | None = None,
                 target_assignment: MemberAssignment | None = None) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.assignment = assignment
        self.target_assignment = target_assignment
        self.group_instance_id = group_instance_id


class ConsumerGroupDescription:
    def __init__(self, group_id: str, is_simple_consumer_group: bool, members: list[MemberDescription],
                 partition_assignor: str, state: object, coordinator: Node,
                 authorized_operations: Iterable[AclOperation] | None = None,
                 type: object = ConsumerGroupType.UNKNOWN) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.members = members
        self.authorized_operations = None if authorized_operations is None else list(authorized_operations)
        self.partition_assignor = partition_assignor
        if state is not None:
            self.state = _enum(state, ConsumerGroupState)
        if type is not None:
            self.type = _enum(type, ConsumerGroupType)
        self.coordinator = coordinator


class OffsetSpec:
    """What list_offsets() looks for: ``OffsetSpec.earliest()``, ``latest()``,
    ``max_timestamp()``, ``for_timestamp(ms)``; ``OffsetSpec(n)`` picks one by number (-2, -1,
    -3, or a timestamp)."""

    _values: ClassVar[dict[int, OffsetSpec]] = {}
    _value: int
    timestamp: int  # for_timestamp()'s

    def __new__(cls, index: int) -> OffsetSpec:
        if index < 0:
            return cls._values[index]
        return cls.for_timestamp(index)

    @classmethod
    def _make(cls, value: int) -> OffsetSpec:
        o = object.__new__(cls)
        o._value = value
        return o

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return _EARLIEST

    @classmethod
    def latest(cls) -> OffsetSpec:
        return _LATEST

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return _MAX_TIMESTAMP

    @classmethod
    def for_timestamp(cls, timestamp: int) -> OffsetSpec:
        o = OffsetSpec._make(int(timestamp))
        o.timestamp = int(timestamp)
        return o

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, OffsetSpec):
            return NotImplemented
        return self._value < other._value


_EARLIEST = OffsetSpec._make(-2)
_LATEST = OffsetSpec._make(-1)
_MAX_TIMESTAMP = OffsetSpec._make(-3)
OffsetSpec._values.update({-2: _EARLIEST, -1: _LATEST, -3: _MAX_TIMESTAMP})


class ListOffsetsResultInfo:
    def __init__(self, offset: int, timestamp: int, leader_epoch: int | None) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.leader_epoch = leader_epoch if leader_epoch is not None and leader_epoch >= 0 else None


class DescribeClusterResult:
    def __init__(self, controller: Node | None, nodes: list[Node], cluster_id: str | None = None,
                 authorized_operations: Iterable[AclOperation] | None = None) -> None:
        self.cluster_id = cluster_id
        self.controller = controller
        self.nodes = nodes
        self.authorized_operations = None if authorized_operations is None else list(authorized_operations)


class TopicCollection:
    def __init__(self, topic_names: list[str]) -> None:
        self.topic_names = topic_names


class TopicPartitionInfo:
    def __init__(self, id: int, leader: Node | None, replicas: list[Node], isr: list[Node]) -> None:
        self.id = id
        self.leader = leader
        self.replicas = replicas
        self.isr = isr


class TopicDescription:
    def __init__(self, name: str, topic_id: Uuid | None, is_internal: bool,
                 partitions: list[TopicPartitionInfo],
                 authorized_operations: Iterable[AclOperation] | None = None) -> None:
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.partitions = partitions
        self.authorized_operations = None if authorized_operations is None else list(authorized_operations)


class AclOperation(Enum):
    """Kafka's ACL operations (the wire's numbering, which librdkafka keeps)."""
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def _int64(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer")
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(f"{what}: int too big to convert")
    return value


class Uuid:
    """confluent-kafka's ``Uuid``: 128 bits as two signed 64-bit halves (Java's layout), shown
    as base64 of the 16 big-endian bytes without padding, as Kafka's tools print topic ids.

    Unlike confluent-kafka's (which compares by identity) two Uuids of the same bits are equal;
    ``uuid`` gives the standard library's value."""

    __slots__ = ("_msb", "_lsb")

    def __init__(self, most_significant_bits: int, least_significant_bits: int) -> None:
        self._msb = _int64(most_significant_bits, "most_significant_bits")
        self._lsb = _int64(least_significant_bits, "least_significant_bits")

    @classmethod
    def from_uuid(cls, value: _uuid.UUID) -> Uuid:
        n = value.int
        msb, lsb = n >> 64, n & ((1 << 64) - 1)
        return cls(msb - (1 << 64) if msb >= 1 << 63 else msb, lsb - (1 << 64) if lsb >= 1 << 63 else lsb)

    def get_most_significant_bits(self) -> int:
        return self._msb

    def get_least_significant_bits(self) -> int:
        return self._lsb

    @property
    def uuid(self) -> _uuid.UUID:
        import uuid
        return uuid.UUID(int=((self._msb & ((1 << 64) - 1)) << 64) | (self._lsb & ((1 << 64) - 1)))

    def __str__(self) -> str:
        import base64
        return base64.b64encode(self.uuid.bytes).decode("ascii").rstrip("=")

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Uuid):
            return NotImplemented
        return (self._msb, self._lsb) == (other._msb, other._lsb)

    def __hash__(self) -> int:
        return hash((self._msb, self._lsb))

