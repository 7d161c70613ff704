"""Cluster administration: topics, partitions, configs, consumer groups and their offsets,
offsets of partitions, records, the cluster.

    with Admin({"bootstrap.servers": "localhost:9092"}) as admin:
        admin.create_topics([("events", 6, 1)], ignore_existing=True)
        snapshot = admin.list_topics()
        snapshot.topics["events"].partitions[0].leader

Timeouts are in seconds, as in confluent-kafka.  Broker errors surface as the typed
:class:`~kwire.errors.BrokerError` subclasses (``TopicAlreadyExistsError``, ...).  Calls on
several items (topics, resources, groups, partitions) return ``{item: result}``; with
``raise_on_error=True`` (the default) the first item's error is raised instead, else an item's
error is its result.

Which request goes where: CreateTopics/DeleteTopics/CreatePartitions to the controller (any
broker forwards them under KRaft), DescribeConfigs/IncrementalAlterConfigs of a broker resource
to that broker, of other resources to any broker; group calls (DescribeGroups, DeleteGroups,
OffsetFetch, OffsetCommit, OffsetDelete) to the group's coordinator (FindCoordinator, retried
while the coordinator is loading or moving); ListGroups to every broker; ListOffsets and
DeleteRecords to each partition's leader; DescribeCluster to any broker.

The calls live by area -- :mod:`.topics` (topics, partitions, records, configs, the cluster),
:mod:`.groups` (consumer groups and their offsets), :mod:`.offsets` (partitions' offsets and
log bounds) -- on :mod:`._base`'s plumbing; :mod:`.types` holds the values they return.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config import Config, parse_config
from ..net import ClusterSnapshot, NetworkClient
from .groups import GroupCalls
from .offsets import OffsetCalls
from .topics import TopicCalls
from .types import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    BrokerNode,
    ClusterDescription,
    ConfigEntry,
    ConfigSynonym,
    GroupDescription,
    GroupListing,
    GroupListings,
    GroupMember,
    ListedOffset,
    LogBounds,
    NewTopic,
    PartitionDescription,
    TopicDescription,
)

__all__ = ["Admin", "NewTopic", "ClusterSnapshot", "ConfigEntry", "ConfigSynonym", "GroupListing",
           "GroupMember", "GroupDescription", "GroupListings", "ListedOffset", "LogBounds",
           "ClusterDescription", "BrokerNode", "TopicDescription", "PartitionDescription",
           "RESOURCE_TOPIC", "RESOURCE_BROKER", "RESOURCE_BROKER_LOGGER", "RESOURCE_GROUP",
           "OP_SET", "OP_DELETE", "OP_APPEND", "OP_SUBTRACT", "EARLIEST", "LATEST", "MAX_TIMESTAMP"]


class Admin(TopicCalls, GroupCalls, OffsetCalls):
    """A cluster's administration over one pool of connections (see the module's text)."""

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *,
                 tracer: Callable[[dict[str, Any]], None] | None = None,
                 network: NetworkClient | None = None):
        """``network``: an open NetworkClient to share (its owner closes it; :meth:`close` does
        not), e.g. a Spark plan's offset look-ups and their group calls over one pool."""
        self.config = config if isinstance(config, Config) else parse_config(config or {}, role="admin")
        self._owns_net = network is None
        self._net = network if network is not None else NetworkClient(
            self.config, tracer=tracer, auto_metadata=False)

    @property
    def network(self) -> NetworkClient:
        return self._net

    def close(self) -> None:
        if self._owns_net:
            self._net.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
