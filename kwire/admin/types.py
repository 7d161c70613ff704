"""The values Admin's calls take and return: frozen dataclasses, and the wire constants
(config resource types, IncrementalAlterConfigs operations, list_offsets specs)."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import KwireError

# config resource types as on the wire (DescribeConfigs, IncrementalAlterConfigs)
RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP = 2, 4, 8, 32
# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
# list_offsets specs besides a timestamp in ms
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3



@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One configuration property of a resource, as DescribeConfigs tells it.  ``source``:
    Kafka's ConfigSource (1 dynamic topic, 2 dynamic broker, 3 dynamic default broker,
    4 static broker, 5 default, 6 dynamic broker logger, 7 client metrics, 8 group)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_default: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str  # "consumer" for consumer groups, "" for simple (commit-only) groups
    state: str          # "Stable", "Empty", ... ("" from brokers before ListGroups v4)
    type: str           # "classic", "consumer" ("" from brokers before ListGroups v5)
    coordinator_id: int


@dataclass(frozen=True)
class GroupMember:
    """A member of a group.  Classic groups (DescribeGroups): ``metadata`` and
    ``assignment_data`` are the bytes the member and the leader sent (a consumer's
    ConsumerProtocolSubscription / ConsumerProtocolAssignment), ``assignment`` the decoded
    partitions and ``subscribed_topics`` the decoded subscription (both () when the bytes are
    not a consumer's).  KIP-848 groups (ConsumerGroupDescribe): ``member_epoch``, the subscription the
    member sent (``subscribed_topics`` / ``subscribed_regex``), its current ``assignment`` and
    the coordinator's ``target_assignment``; ``member_type`` "consumer", or "classic" for a
    classic-protocol member inside a KIP-848 group."""
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, int], ...]  # (topic, partition) pairs; () if not a consumer's
    metadata: bytes | None = None
    assignment_data: bytes | None = None
    member_epoch: int | None = None
    target_assignment: tuple[tuple[str, int], ...] = ()
    subscribed_topics: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    rack_id: str | None = None
    member_type: str | None = None


@dataclass(frozen=True)
class BrokerNode:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    """A group as its coordinator describes it.  ``type`` "classic" (DescribeGroups) or
    "consumer" (a KIP-848 group, ConsumerGroupDescribe: ``protocol`` is the broker-side
    assignor, ``group_epoch`` / ``assignment_epoch`` its epochs, ``topic_ids`` the ids of the
    assigned topics)."""
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor (consumer groups)
    members: tuple[GroupMember, ...]
    coordinator: BrokerNode
    type: str = "classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    topic_ids: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GroupListings:
    """Every group the brokers listed (once each, with the broker that listed it as its
    coordinator), and the brokers that could not list theirs."""
    groups: tuple[GroupListing, ...]
    errors: Mapping[int, KwireError]


@dataclass(frozen=True)
class ListedOffset:
    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True)
class LogBounds:
    """Where a partition's log starts and ends (the next offset to be written; under
    read_committed the last stable offset)."""
    log_start: int
    end: int


@dataclass(frozen=True)
class PartitionDescription:
    """One partition of a described topic: its leader (None when it has none), replicas and
    in-sync replicas, as brokers (a replica the metadata does not list has host "" and port -1)."""

    partition: int
    leader: BrokerNode | None
    replicas: tuple[BrokerNode, ...]
    isr: tuple[BrokerNode, ...]
    leader_epoch: int = -1


@dataclass(frozen=True)
class TopicDescription:
    """A topic as describe_topics() reports it.  ``authorized_operations``: the ACL operation
    codes the client may perform on it (3 READ, 4 WRITE, ...: Kafka's AclOperation), or None
    when not asked for."""

    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]
    authorized_operations: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]


@dataclass(frozen=True)
class NewTopic:
    """A topic to create.  ``replication_factor=-1`` / ``num_partitions=-1``: broker default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    config: Mapping[str, str] | None = None
