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
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

from .config import Config, parse_config
from .consumer.types import OffsetAndMetadata
from .errors import (  # noqa: F401
    BrokerError,
    KafkaTimeoutError,
    KwireError,
    ProtocolError,
    TopicAlreadyExistsError,
    UnsupportedVersionError,
    for_code,
)
from .net import BrokerInfo, ClusterSnapshot, Metadata, NetworkClient
from .protocol.api import decode_assignment
from .protocol.schema import ZERO_UUID

__all__ = ["Admin", "NewTopic", "ClusterSnapshot", "ConfigEntry", "ConfigSynonym", "GroupListing",
           "GroupMember", "GroupDescription", "GroupListings", "ListedOffset", "ClusterDescription", "BrokerNode",
           "TopicDescription", "PartitionDescription",
           "RESOURCE_TOPIC", "RESOURCE_BROKER", "RESOURCE_BROKER_LOGGER", "RESOURCE_GROUP",
           "OP_SET", "OP_DELETE", "OP_APPEND", "OP_SUBTRACT", "EARLIEST", "LATEST", "MAX_TIMESTAMP"]

_TOPIC_ALREADY_EXISTS = 36
_GROUP_ID_NOT_FOUND = 69
_COORDINATOR_RETRY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR

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
    partitions.  KIP-848 groups (ConsumerGroupDescribe): ``member_epoch``, the subscription the
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


def _ms(timeout_s: float | None, default_ms: int) -> int:
    return default_ms if timeout_s is None else max(0, int(timeout_s * 1000))


class Admin:
    """Admin operations over one :class:`~kwire.net.NetworkClient` (blocking calls)."""

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *, tracer=None,
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

    def create_topics(self, topics: Iterable[NewTopic | tuple | str], timeout: float | None = 30.0, *,
                      ignore_existing: bool = False, validate_only: bool = False,
                      raise_on_error: bool = True, wait_for_leaders: bool = False) -> dict[str, BrokerError | None]:
        """Create topics: each a :class:`NewTopic`, ``(name, num_partitions, replication_factor)``
        or a name (broker defaults).

        Returns ``{name: None | error}``.  With ``raise_on_error`` (default) the first error is
        raised instead (``TopicAlreadyExistsError`` when a topic exists, unless
        ``ignore_existing``); every error carries ``.topic``.  ``wait_for_leaders`` then polls
        metadata until each new topic has a leader for every partition (or ``timeout``).
        """
        new = [_new_topic(t) for t in topics]
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        body = {
            "topics": [{
                "name": t.name, "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor, "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (t.config or {}).items()],
            } for t in new],
            "timeout_ms": timeout_ms, "validate_only": validate_only,
        }
        resp = self._net.request(self._controller(timeout_ms), "CreateTopics", body, timeout_ms + 1000)
        results: dict[str, BrokerError | None] = {t.name: None for t in new}
        for r in resp["topics"]:
            code = r["error_code"]
            if code == 0 or (code == _TOPIC_ALREADY_EXISTS and ignore_existing):
                results[r["name"]] = None
                continue
            err = for_code(code, r.get("error_message"))
            err.topic = r["name"]
            results[r["name"]] = err
        if raise_on_error:
            for err in results.values():
                if err is not None:
                    raise err
        if wait_for_leaders and not validate_only:
            self.wait_for_topics([n for n, e in results.items() if e is None],
                                 max(0.0, deadline - time.monotonic()))
        return results

    def wait_for_topics(self, names: Iterable[str], timeout: float | None = 30.0) -> ClusterSnapshot:
        """Poll metadata until every topic in ``names`` has a leader for each partition."""
        names = list(names)
        deadline = time.monotonic() + _ms(timeout, self.config.socket_timeout_ms) / 1000
        while True:
            snap = self.list_topics(names, timeout=max(0.1, deadline - time.monotonic()))
            ok = all(n in snap.topics and not snap.topics[n].error_code and snap.topics[n].partitions and
                     all(p.leader >= 0 for p in snap.topics[n].partitions.values()) for n in names)
            if ok:
                return snap
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"topics {names} have no leaders after {timeout}s")
            time.sleep(0.05)

    def list_topics(self, topic: str | Iterable[str] | None = None, timeout: float | None = 10.0, *,
                    allow_auto_topic_creation: bool = False) -> ClusterSnapshot:
        """A typed snapshot of the cluster: brokers, controller, and the topics asked for
        (``None``: all) with their partitions, leaders, replicas and ISR."""
        if topic is None:
            names = None
        elif isinstance(topic, str):
            names = [topic]
        else:
            names = list(topic)
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        md = Metadata()
        resp = self._net.request(
            None, "Metadata",
            lambda v: md.request_body(v, names, allow_auto_topic_creation=allow_auto_topic_creation),
            timeout_ms)
        md.update(resp, 0, all_topics=True)
        return md.snapshot()

    def delete_records(self, offsets: Mapping[tuple[str, int], int], timeout: float | None = 30.0
                       ) -> dict[tuple[str, int], int]:
        """Delete records before ``offset`` for each ``(topic, partition)`` (DeleteRecords, sent
        to each partition's leader); returns the new low watermarks.  Errors raise."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        snap = self.list_topics({t for t, _ in offsets}, timeout)
        by_leader: dict[int, dict[str, list[dict]]] = {}
        for (t, p), off in offsets.items():
            info = snap.topics.get(t)
            part = None if info is None else info.partitions.get(p)
            if part is None or part.leader < 0:
                raise for_code(3, f"{t}[{p}] has no known leader")
            by_leader.setdefault(part.leader, {}).setdefault(t, []).append(
                {"partition_index": p, "offset": off})
        pending = []
        for leader, topics in by_leader.items():
            body = {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout_ms": timeout_ms}
            pending.append(self._net.send(leader, "DeleteRecords", body, timeout_ms=timeout_ms + 1000))
        out: dict[tuple[str, int], int] = {}
        for f in pending:
            resp = self._net.wait(f).result()
            for t in resp["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        raise for_code(p["error_code"], f"{t['name']}[{p['partition_index']}]")
                    out[(t["name"], p["partition_index"])] = p["low_watermark"]
        return out

    # --- topics and partitions ------------------------------------------------------------------
    def delete_topics(self, names: Iterable[str], timeout: float | None = 30.0, *,
                      raise_on_error: bool = True) -> dict[str, BrokerError | None]:
        """Delete topics (DeleteTopics); ``{name: None | error}``."""
        names = list(names)
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        body = {"topic_names": names, "topics": [{"name": n, "topic_id": ZERO_UUID} for n in names],
                "timeout_ms": timeout_ms}
        resp = self._call(self._controller(timeout_ms), "DeleteTopics", body, timeout_ms + 1000)
        out: dict[str, BrokerError | None] = {n: None for n in names}
        for r in resp["responses"]:
            out[r["name"]] = _err(r["error_code"], r.get("error_message"), topic=r["name"])
        return _results(out, raise_on_error)

    def create_partitions(self, new_totals: Mapping[str, int], timeout: float | None = 30.0, *,
                          validate_only: bool = False, raise_on_error: bool = True
                          ) -> dict[str, BrokerError | None]:
        """Grow topics to ``{topic: new total partition count}`` (CreatePartitions)."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        body = {"topics": [{"name": t, "count": int(n), "assignments": None}
                           for t, n in new_totals.items()],
                "timeout_ms": timeout_ms, "validate_only": validate_only}
        resp = self._call(self._controller(timeout_ms), "CreatePartitions", body, timeout_ms + 1000)
        out: dict[str, BrokerError | None] = {t: None for t in new_totals}
        for r in resp["results"]:
            out[r["name"]] = _err(r["error_code"], r.get("error_message"), topic=r["name"])
        return _results(out, raise_on_error)

    # --- configs -------------------------------------------------------------------------------
    def describe_configs(self, resources: Iterable[tuple[int, str]], timeout: float | None = 30.0, *,
                         include_synonyms: bool = False, raise_on_error: bool = True
                         ) -> dict[tuple[int, str], dict[str, ConfigEntry] | BrokerError]:
        """The configuration of each ``(resource_type, name)`` (RESOURCE_TOPIC, RESOURCE_BROKER
        with the broker id as name, ...): ``{resource: {property: ConfigEntry}}``."""
        resources = [(int(t), str(n)) for t, n in resources]
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        out: dict = {}
        for node, group in self._by_resource_node(resources, timeout_ms).items():
            body = {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None}
                                  for t, n in group],
                    "include_synonyms": include_synonyms, "include_documentation": False}
            resp = self._call(node, "DescribeConfigs", body, timeout_ms)
            for r in resp["results"]:
                key = (r["resource_type"], r["resource_name"])
                err = _err(r["error_code"], r.get("error_message"))
                out[key] = err if err is not None else {
                    c["name"]: ConfigEntry(
                        c["name"], c["value"], c.get("config_source", -1), c["read_only"],
                        c.get("config_source") == 5 if "config_source" in c else c.get("is_default", False),
                        c["is_sensitive"],
                        tuple(ConfigSynonym(s["name"], s["value"], s["source"])
                              for s in c.get("synonyms") or ()))
                    for c in r["configs"]}
        return _results({k: out.get(k) for k in resources}, raise_on_error)

    def incremental_alter_configs(self, changes: Mapping[tuple[int, str], Iterable[tuple]],
                                  timeout: float | None = 30.0, *, validate_only: bool = False,
                                  raise_on_error: bool = True
                                  ) -> dict[tuple[int, str], BrokerError | None]:
        """Change properties of resources (IncrementalAlterConfigs): ``{(resource_type, name):
        [(property, op, value), ...]}`` with op OP_SET, OP_DELETE, OP_APPEND or OP_SUBTRACT;
        properties not named keep their values."""
        changes = {(int(t), str(n)): list(ops) for (t, n), ops in changes.items()}
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        out: dict = {k: None for k in changes}
        for node, group in self._by_resource_node(list(changes), timeout_ms).items():
            body = {"resources": [{"resource_type": t, "resource_name": n,
                                   "configs": [{"name": name, "config_operation": int(op),
                                                "value": None if value is None else str(value)}
                                               for name, op, value in changes[(t, n)]]}
                                  for t, n in group],
                    "validate_only": validate_only}
            resp = self._call(node, "IncrementalAlterConfigs", body, timeout_ms)
            for r in resp["responses"]:
                out[(r["resource_type"], r["resource_name"])] = _err(r["error_code"], r.get("error_message"))
        return _results(out, raise_on_error)

    def alter_configs(self, configs: Mapping[tuple[int, str], Mapping[str, Any]],
                      timeout: float | None = 30.0, *, validate_only: bool = False,
                      raise_on_error: bool = True) -> dict[tuple[int, str], BrokerError | None]:
        """Replace resources' whole configuration (AlterConfigs, deprecated by Kafka): ``{(type,
        name): {property: value}}``; every property not named returns to its default.  Prefer
        :meth:`incremental_alter_configs`."""
        configs = {(int(t), str(n)): dict(c) for (t, n), c in configs.items()}
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        out: dict = {k: None for k in configs}
        for node, group in self._by_resource_node(list(configs), timeout_ms).items():
            body = {"resources": [{"resource_type": t, "resource_name": n,
                                   "configs": [{"name": k, "value": None if v is None else str(v)}
                                               for k, v in configs[(t, n)].items()]}
                                  for t, n in group],
                    "validate_only": validate_only}
            resp = self._call(node, "AlterConfigs", body, timeout_ms)
            for r in resp["responses"]:
                out[(r["resource_type"], r["resource_name"])] = _err(r["error_code"], r.get("error_message"))
        return _results(out, raise_on_error)

    def _by_resource_node(self, resources, timeout_ms) -> dict:
        """Broker resources go to that broker (its own configs), the others to any broker."""
        out: dict = {}
        for t, n in resources:
            node = None
            if t in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and n:
                node = int(n)
                self._know_broker(node, timeout_ms)
            out.setdefault(node, []).append((t, n))
        return out

    # --- consumer groups -------------------------------------------------------------------------
    def list_consumer_groups(self, states: Iterable[str] | None = None,
                             types: Iterable[str] | None = None, timeout: float | None = 30.0
                             ) -> list[GroupListing]:
        """Every group of the cluster (ListGroups to each broker), filtered by state ("Stable",
        "Empty", ...) and type ("classic", "consumer") when given.  A broker's error raises."""
        listed = self.list_groups(states, types, timeout)
        if listed.errors:
            raise next(iter(listed.errors.values()))
        return list(listed.groups)

    def list_groups(self, states: Iterable[str] | None = None, types: Iterable[str] | None = None,
                    timeout: float | None = 30.0) -> GroupListings:
        """Like :meth:`list_consumer_groups`, but a broker that cannot answer (an error code,
        no ListGroups, a lost connection) is reported in ``errors`` beside the groups the
        others listed."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        self._net.refresh_metadata([], timeout_ms)
        body = {"states_filter": list(states or ()), "types_filter": list(types or ())}
        pending = [(b, self._net.send(b, "ListGroups", body, timeout_ms=timeout_ms))
                   for b in sorted(self._net.metadata.brokers)]
        listings: dict[str, GroupListing] = {}
        errors: dict[int, KwireError] = {}
        for b, f in pending:
            try:
                resp = self._net.wait(f).result()
            except KwireError as exc:
                errors[b] = exc
                continue
            err = _err(resp["error_code"], f"ListGroups on broker {b}")
            if err is not None:
                errors[b] = err
                continue
            for g in resp["groups"]:
                listings.setdefault(g["group_id"], GroupListing(
                    g["group_id"], g["protocol_type"], g.get("group_state") or "",
                    g.get("group_type") or "", b))
        return GroupListings(tuple(listings.values()), errors)

    def describe_consumer_groups(self, group_ids: Iterable[str], timeout: float | None = 30.0, *,
                                 raise_on_error: bool = True
                                 ) -> dict[str, GroupDescription | KwireError]:
        """State, assignor and members (with their assigned partitions) of groups, asked of
        each group's coordinator: DescribeGroups for classic groups, ConsumerGroupDescribe for
        KIP-848 groups (tried when DescribeGroups does not describe a classic group: Kafka 4
        answers it GROUP_ID_NOT_FOUND for a KIP-848 group).  A group that does not exist is
        GroupIdNotFoundError (its ``coordinator`` set); brokers before DescribeGroups v6
        describe it as "Dead" instead, and some (Tansu) as an "Empty" group with no protocol
        type -- which is also what a group that only ever committed offsets looks like."""
        group_ids = list(group_ids)

        def one(node, g, timeout_ms):
            coord = self._broker_node(node)
            unsupported: UnsupportedVersionError | None = None
            d = None
            try:
                resp = self._call(node, "DescribeGroups",
                                  {"groups": [g], "include_authorized_operations": False}, timeout_ms)
                d = next((x for x in resp["groups"] if x["group_id"] == g), None)
            except UnsupportedVersionError as exc:
                unsupported = exc
            if d is None or not (d["error_code"] == 0 and (d["members"] or d["protocol_type"])):
                k = self._describe_kip848(node, g, timeout_ms)
                if isinstance(k, BrokerError):
                    k.coordinator = coord
                    return k
                if k is not None and (k["members"] or k["group_epoch"] > 0):
                    return _kip848_description(k, coord)
            if d is None:
                if unsupported is not None:
                    unsupported.group = g
                    return unsupported
                raise ProtocolError(f"DescribeGroups answered without group {g!r}")
            err = _err(d["error_code"], d.get("error_message"), group=g, coordinator=coord)
            if err is not None:
                return err
            return _classic_description(d, coord)
        return _results(self._per_group(group_ids, one, timeout), raise_on_error)

    def _describe_kip848(self, node: int, g: str, timeout_ms: int) -> dict | BrokerError | None:
        """The ConsumerGroupDescribe entry of ``g``; None when the coordinator has no
        ConsumerGroupDescribe or ``g`` is no KIP-848 group (GROUP_ID_NOT_FOUND)."""
        try:
            resp = self._call(node, "ConsumerGroupDescribe",
                              {"group_ids": [g], "include_authorized_operations": False}, timeout_ms)
        except UnsupportedVersionError:
            return None
        k = next((x for x in resp["groups"] if x["group_id"] == g), None)
        if k is None or k["error_code"] == _GROUP_ID_NOT_FOUND:
            return None
        err = _err(k["error_code"], k.get("error_message"), group=g)
        return err if err is not None else k

    def _broker_node(self, node: int) -> BrokerNode:
        b = self._net.metadata.broker(node)
        return BrokerNode(node, b.host, b.port, b.rack) if b else BrokerNode(node, "", -1)

    def delete_consumer_groups(self, group_ids: Iterable[str], timeout: float | None = 30.0, *,
                               raise_on_error: bool = True) -> dict[str, BrokerError | None]:
        """Delete empty groups and their committed offsets (DeleteGroups)."""
        def one(node, g, timeout_ms):
            resp = self._call(node, "DeleteGroups", {"groups_names": [g]}, timeout_ms)
            r = resp["results"][0]
            return _err(r["error_code"], None, group=g)
        return _results(self._per_group(list(group_ids), one, timeout), raise_on_error)

    @overload
    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    timeout: float | None = 30.0, *, require_stable: bool = False,
                                    raise_on_error: Literal[True] = True
                                    ) -> dict[tuple[str, int], OffsetAndMetadata]: ...

    @overload
    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    timeout: float | None = 30.0, *, require_stable: bool = False,
                                    raise_on_error: bool
                                    ) -> dict[tuple[str, int], OffsetAndMetadata | BrokerError]: ...

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    timeout: float | None = 30.0, *, require_stable: bool = False,
                                    raise_on_error: bool = True) -> dict[tuple[str, int], Any]:
        """The group's committed offsets (OffsetFetch): of ``partitions``, or (None) of every
        partition it has committed.  A partition without a commit has offset -1.  A
        partition's error raises, or with ``raise_on_error=False`` is that partition's value;
        an error of the whole group raises either way."""
        by_topic: dict[str, list[int]] | None = None
        if partitions is not None:
            by_topic = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
        topics = None if by_topic is None else [{"name": t, "partition_indexes": ps}
                                                 for t, ps in by_topic.items()]
        body = {"group_id": group_id, "topics": topics, "require_stable": require_stable,
                "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                            "topics": topics}]}

        def one(node, g, timeout_ms):
            # v10 names topics by id only; v2 is the first to take a null topic list ("all")
            resp = self._call(node, "OffsetFetch", body, timeout_ms, max_version=9,
                              min_version=2 if topics is None else None)
            if resp.get("groups"):
                grp = next((x for x in resp["groups"] if x["group_id"] == g), resp["groups"][0])
                code, tlist = grp["error_code"], grp["topics"]
            else:
                code, tlist = resp.get("error_code", 0), resp["topics"]
            err = _err(code, None, group=g)
            if err is not None:
                return err
            out: dict = {}
            for t in tlist:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    perr = _err(p["error_code"], f"{key[0]}[{key[1]}]", group=g, topic=key[0])
                    if perr is not None:
                        if perr.code in _COORDINATOR_RETRY:  # (OffsetFetch v0-v1 put these here)
                            return perr
                        out[key] = perr
                        continue
                    ep = p.get("committed_leader_epoch", -1)
                    out[key] = OffsetAndMetadata(
                        p["committed_offset"], ep if ep is not None and ep >= 0 else None, p["metadata"])
            return out
        res = self._per_group([group_id], one, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        return _results(res, raise_on_error)

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
                                     timeout: float | None = 30.0, *, raise_on_error: bool = True
                                     ) -> dict[tuple[str, int], BrokerError | None]:
        """Set a group's committed offsets (OffsetCommit outside any generation: the group must
        have no active members, else UNKNOWN_MEMBER_ID)."""
        by_topic: dict[str, list] = {}
        for (t, p), o in offsets.items():
            om = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            by_topic.setdefault(t, []).append({
                "partition_index": p, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch if om.leader_epoch is not None else -1,
                "committed_metadata": om.metadata or "", "commit_timestamp": -1})
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def one(node, g, timeout_ms):
            resp = self._call(node, "OffsetCommit", body, timeout_ms, max_version=9)
            out = {}
            for t in resp["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"])] = _err(
                        p["error_code"], f"{t['name']}[{p['partition_index']}]", group=g)
            coord = next((e for e in out.values() if e is not None and e.code in _COORDINATOR_RETRY), None)
            return coord if coord is not None else out
        res = self._per_group([group_id], one, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        return _results({tp: res.get(tp) for tp in offsets}, raise_on_error)

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                                      timeout: float | None = 30.0, *, raise_on_error: bool = True
                                      ) -> dict[tuple[str, int], BrokerError | None]:
        """Delete a group's committed offsets of ``partitions`` (OffsetDelete; refused with
        GROUP_SUBSCRIBED_TO_TOPIC while a member consumes the topic)."""
        partitions = list(partitions)
        by_topic: dict[str, list] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append({"partition_index": p})
        body = {"group_id": group_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def one(node, g, timeout_ms):
            resp = self._call(node, "OffsetDelete", body, timeout_ms)
            err = _err(resp["error_code"], None, group=g)
            if err is not None:
                return err
            return {(t["name"], p["partition_index"]): _err(p["error_code"], f"{t['name']}[{p['partition_index']}]", group=g)
                    for t in resp["topics"] for p in t["partitions"]}
        res = self._per_group([group_id], one, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        return _results({tp: res.get(tp) for tp in partitions}, raise_on_error)

    def _per_group(self, group_ids: list, one, timeout) -> dict:
        """``one(coordinator_node, group_id, timeout_ms)`` for each group, retried (with a new
        FindCoordinator) while the coordinator is loading, unavailable or has moved."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        out: dict = {}
        for g in group_ids:
            while True:
                left_ms = max(1, int((deadline - time.monotonic()) * 1000))
                node = self._find_coordinator(g, left_ms)
                res = node if isinstance(node, BaseException) else one(node, g, left_ms)
                if isinstance(res, BrokerError) and res.code in _COORDINATOR_RETRY \
                        and time.monotonic() + self.config.retry_backoff_ms / 1000 < deadline:
                    time.sleep(self.config.retry_backoff_ms / 1000)
                    continue
                out[g] = res
                break
        return out

    def find_coordinator(self, group_id: str, timeout: float | None = 30.0) -> BrokerNode:
        """The group's coordinator (FindCoordinator), asked again while the cluster has none
        ready (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)
        within ``timeout``; other errors raise."""
        res = self._per_group([group_id], lambda node, g, timeout_ms: node, timeout)[group_id]
        if isinstance(res, BaseException):
            raise res
        b = self._net.metadata.broker(res)
        assert b is not None  # (_find_coordinator learned it)
        return BrokerNode(b.node_id, b.host, b.port, b.rack)

    def _find_coordinator(self, group_id: str, timeout_ms: int) -> int | BrokerError:
        resp = self._call(None, "FindCoordinator",
                          {"key": group_id, "key_type": 0, "coordinator_keys": [group_id]}, timeout_ms)
        c = next((c for c in resp["coordinators"] if c.get("key") == group_id),
                 resp["coordinators"][0]) if resp.get("coordinators") else resp
        err = _err(c["error_code"], c.get("error_message"), group=group_id)
        if err is not None:
            return err
        node = c["node_id"]
        self._know_broker(node, timeout_ms)
        md = self._net.metadata
        if md.broker(node) is None:  # a coordinator the metadata does not list: its address
            md.brokers[node] = BrokerInfo(node, c["host"], c["port"])
        return node

    # --- partitions' offsets, the cluster ---------------------------------------------------------
    def list_offsets(self, specs: Mapping[tuple[str, int], int], timeout: float | None = 30.0, *,
                     isolation_level: str = "read_uncommitted", raise_on_error: bool = True
                     ) -> dict[tuple[str, int], ListedOffset | BrokerError]:
        """Offsets of partitions (ListOffsets to each leader): ``{(topic, partition): spec}``
        with spec EARLIEST, LATEST, MAX_TIMESTAMP (the record with the highest timestamp) or a
        timestamp in ms (the first offset at or after it; offset -1 when none).

        Leaders and their epochs come from a metadata refresh of the topics asked; each
        request carries the leader epoch it knows (KIP-320), so a leader that has moved on
        answers FENCED_LEADER_EPOCH rather than a stale offset.  Partitions answered with a
        retriable error (leader moved or not yet elected, epoch fenced or ahead, offset not yet
        available), and partitions without a leader yet, are asked again after a new refresh,
        until ``timeout``.  A topic the metadata does not have is UNKNOWN_TOPIC_OR_PARTITION at
        once."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        iso = 1 if isolation_level == "read_committed" else 0
        min_version = 7 if any(s == MAX_TIMESTAMP for s in specs.values()) else None
        md = self._net.metadata
        out: dict[tuple[str, int], ListedOffset | BrokerError] = {}
        todo = dict(specs)
        while todo:
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            self._net.refresh_metadata(sorted({t for t, _ in todo}), left_ms)
            by_leader: dict[int, dict[str, list]] = {}
            again: dict[tuple[str, int], int] = {}
            for (t, p), spec in todo.items():
                part = md.partition(t, p)
                info = md.topic(t)
                if part is None or part.leader < 0:
                    code = 5 if part is not None else info.error_code if info is not None and \
                        info.error_code else 3
                    out[(t, p)] = _err(code, f"{t}[{p}] has no known leader", topic=t,
                                       from_metadata=True)
                    if part is not None:  # being elected: asked again
                        again[(t, p)] = spec
                    continue
                self._know_broker(part.leader, left_ms)
                by_leader.setdefault(part.leader, {}).setdefault(t, []).append(
                    {"partition_index": p, "current_leader_epoch": part.leader_epoch,
                     "timestamp": int(spec), "max_num_offsets": 1})
            pending = []
            for leader, topics in by_leader.items():
                body = {"replica_id": -1, "isolation_level": iso, "timeout_ms": left_ms,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                pending.append(self._net.send(leader, "ListOffsets", body, timeout_ms=left_ms,
                                              min_version=min_version))
            for f in pending:
                resp = self._net.wait(f).result()
                for t in resp["topics"]:
                    for p in t["partitions"]:
                        key = (t["name"], p["partition_index"])
                        if key not in todo:
                            continue
                        err = _err(p["error_code"], f"{key[0]}[{key[1]}]", topic=key[0])
                        if err is not None and err.retriable:
                            again[key] = todo[key]
                        ep = p.get("leader_epoch", -1)
                        out[key] = err if err is not None else ListedOffset(
                            p["offset"], p["timestamp"], ep if ep is not None and ep >= 0 else None)
            wait_s = self.config.retry_backoff_ms / 1000
            if not again or time.monotonic() + wait_s >= deadline:
                break
            time.sleep(wait_s)
            todo = again
        for k in specs:
            if k not in out:
                out[k] = _err(3, f"ListOffsets answered without {k[0]}[{k[1]}]", topic=k[0])
        return _results({k: out[k] for k in specs}, raise_on_error)

    def log_bounds(self, partitions: Iterable[tuple[str, int]], timeout: float | None = 30.0, *,
                   isolation_level: str = "read_uncommitted", raise_on_error: bool = True
                   ) -> dict[tuple[str, int], LogBounds | BrokerError]:
        """Where each partition's log starts and ends, as its leader says.

        ListOffsets answers the earliest and the latest offset; a Fetch at the latest that
        reads nothing confirms both: the end is the larger of ListOffsets' answer and the
        Fetch's high watermark (its last stable offset under read_committed), the start the
        larger of the earliest and the Fetch's log start offset.  (Tansu 0.6 answers
        ListOffsets(latest) with the last batch's base offset + 1, short of the end.)  When
        the Fetch fails, ListOffsets' answers stand."""
        tps = list(dict.fromkeys(partitions))
        if not tps:
            return {}
        earliest = self.list_offsets({tp: EARLIEST for tp in tps}, timeout,
                                     isolation_level=isolation_level, raise_on_error=False)
        latest = self.list_offsets({tp: LATEST for tp in tps}, timeout,
                                   isolation_level=isolation_level, raise_on_error=False)
        out: dict[tuple[str, int], Any] = {}
        at: dict[tuple[str, int], int] = {}
        for tp in tps:
            e, l_ = earliest[tp], latest[tp]
            if isinstance(e, BaseException) or isinstance(l_, BaseException):
                out[tp] = e if isinstance(e, BaseException) else l_
            else:
                at[tp] = l_.offset
        marks = self.fetch_watermarks(at, timeout, isolation_level=isolation_level)
        for tp, end in at.items():
            start = earliest[tp].offset  # type: ignore[union-attr]
            hw, fetched_start = marks.get(tp, (end, -1))
            out[tp] = LogBounds(max(start, fetched_start), max(end, hw))
        return _results({tp: out[tp] for tp in tps}, raise_on_error)

    def fetch_watermarks(self, at: Mapping[tuple[str, int], int], timeout: float | None = 30.0, *,
                         isolation_level: str = "read_uncommitted"
                         ) -> dict[tuple[str, int], tuple[int, int]]:
        """``{tp: (end, log start)}`` as each leader reports them to a Fetch at ``at[tp]`` that
        reads nothing: the end is the high watermark, under read_committed the last stable
        offset.  Partitions whose leader is unknown or whose Fetch failed are left out (the
        caller's ListOffsets answer stands for them)."""
        if not at:
            return {}
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        read_committed = isolation_level == "read_committed"
        snap = self.list_topics({t for t, _ in at}, timeout_ms / 1000)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for (t, p) in sorted(at):
            info = snap.topics.get(t)
            part = None if info is None else info.partitions.get(p)
            if part is not None and part.leader >= 0:
                by_leader.setdefault(part.leader, {}).setdefault(t, []).append(p)
        pending = []
        for leader, topics in by_leader.items():
            ids = {t: snap.topics[t].topic_id for t in topics}
            # max_wait_ms 1, not 0: Tansu answers a zero-wait Fetch with no partitions at all.
            body = {"replica_id": -1, "max_wait_ms": 1, "min_bytes": 0, "max_bytes": 1,
                    "isolation_level": 1 if read_committed else 0, "session_id": 0,
                    "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic": t, "topic_id": ids[t], "partitions": [
                        {"partition": p, "fetch_offset": at[(t, p)], "partition_max_bytes": 1,
                         "current_leader_epoch": -1, "log_start_offset": -1,
                         "last_fetched_epoch": -1} for p in ps]} for t, ps in topics.items()]}
            cap = 12 if any(i == ZERO_UUID for i in ids.values()) else None  # v13+: ids only
            pending.append((self._net.send(leader, "Fetch", body, max_version=cap, min_version=4,
                                           timeout_ms=timeout_ms), ids))
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for f, ids in pending:
            try:
                resp = self._net.wait(f).result()
            except KwireError:
                continue  # ListOffsets' answers stand
            names = {tid: t for t, tid in ids.items()}
            for t in resp["responses"]:
                name = t.get("topic") or names.get(t.get("topic_id"))
                for p in t["partitions"]:
                    if p["error_code"]:
                        continue
                    end = p["high_watermark"]
                    if read_committed and p.get("last_stable_offset", -1) >= 0:
                        end = p["last_stable_offset"]
                    out[(name, p["partition_index"])] = (end, p.get("log_start_offset", -1))
        return out

    def describe_topics(self, topics: Iterable[str], timeout: float | None = 30.0, *,
                        include_authorized_operations: bool = False, raise_on_error: bool = True
                        ) -> dict[str, TopicDescription | BrokerError]:
        """Topic ids, partitions, leaders, replicas and ISR of ``topics`` (one Metadata
        request; v10+ carries topic ids, v8+ the authorized operations).  A topic that does
        not exist is UnknownTopicOrPartitionError (raised, or its value with
        ``raise_on_error=False``); never auto-created."""
        names = list(dict.fromkeys(topics))
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)

        def body(v: int) -> dict:
            return {"topics": [{"name": t, "topic_id": ZERO_UUID} for t in names],
                    "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": include_authorized_operations}
        resp = self._call(None, "Metadata", body, timeout_ms)
        brokers = {b["node_id"]: BrokerNode(b["node_id"], b["host"], b["port"], b.get("rack"))
                   for b in resp["brokers"]}

        def node(i: int) -> BrokerNode:
            return brokers.get(i) or BrokerNode(i, "", -1)
        out: dict[str, TopicDescription | BrokerError] = {}
        for t in resp["topics"]:
            name = t["name"]
            err = _err(t["error_code"], name, topic=name)
            if err is not None:
                out[name] = err
                continue
            parts = tuple(
                PartitionDescription(p["partition_index"], node(p["leader_id"]) if p["leader_id"] >= 0 else None,
                                     tuple(node(r) for r in p["replica_nodes"]),
                                     tuple(node(r) for r in p["isr_nodes"]), p.get("leader_epoch", -1))
                for p in sorted(t["partitions"], key=lambda p: p["partition_index"]))
            ops = None
            bits = t.get("topic_authorized_operations", -0x80000000)
            if include_authorized_operations and bits != -0x80000000:
                ops = tuple(i for i in range(32) if bits >> i & 1)
            out[name] = TopicDescription(name, t.get("topic_id") or ZERO_UUID, bool(t.get("is_internal")),
                                         parts, ops)
        for name in names:
            out.setdefault(name, for_code(3, name))
        return _results({n: out[n] for n in names}, raise_on_error)

    def describe_cluster(self, timeout: float | None = 30.0) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster)."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        resp = self._call(None, "DescribeCluster",
                          {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                           "include_fenced_brokers": False}, timeout_ms)
        err = _err(resp["error_code"], resp.get("error_message"))
        if err is not None:
            raise err
        return ClusterDescription(resp["cluster_id"], resp["controller_id"], tuple(
            BrokerNode(b["broker_id"], b["host"], b["port"], b.get("rack"))
            for b in resp["brokers"]))

    # --- plumbing ----------------------------------------------------------------------------------
    def _call(self, node: int | None, api: str, body: dict | Callable[[int], dict], timeout_ms: int, *,
              max_version: int | None = None, min_version: int | None = None) -> dict:
        f = self._net.send(node, api, body, timeout_ms=timeout_ms, max_version=max_version,
                           min_version=min_version)
        return self._net.wait(f).result()

    def _know_broker(self, node_id: int, timeout_ms: int) -> None:
        """Requests to ``node_id`` need its address: refresh metadata when it is not known."""
        if self._net.metadata.broker(node_id) is None:
            self._net.refresh_metadata([], timeout_ms)

    def _controller(self, timeout_ms: int) -> int | None:
        """CreateTopics goes to the controller (KRaft brokers forward it, so any broker does
        when the controller is unknown or not a broker we can reach)."""
        md = self._net.metadata
        if md.updated_ms < 0:
            try:
                self._net.refresh_metadata([], timeout_ms)
            except Exception:
                return None
        cid = md.controller_id
        return cid if cid >= 0 and md.broker(cid) is not None else None

    def close(self) -> None:
        if self._owns_net:
            self._net.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _new_topic(t) -> NewTopic:
    if isinstance(t, NewTopic):
        return t
    if isinstance(t, str):
        return NewTopic(t)
    return NewTopic(*t)


def _err(code: int, message: str | None, **where) -> BrokerError | None:
    """The typed error of a non-zero code (with ``.topic`` / ``.group`` set), else None."""
    if not code:
        return None
    err = for_code(code, message)
    for k, v in where.items():
        setattr(err, k, v)
    return err


def _assigned(a: Mapping[str, Any] | None) -> tuple[tuple[str, int], ...]:
    """(topic, partition) pairs of a ConsumerGroupDescribe assignment."""
    return tuple(sorted((t["topic_name"], p) for t in (a or {}).get("topic_partitions", ())
                        for p in t["partitions"]))


def _classic_description(d: Mapping[str, Any], coord: BrokerNode) -> GroupDescription:
    """A DescribeGroups entry as a GroupDescription (consumer groups' assignments decoded)."""
    members = []
    for m in d["members"]:
        assignment: tuple = ()
        if d["protocol_type"] == "consumer" and m["member_assignment"]:
            try:
                _, a = decode_assignment(m["member_assignment"])
                assignment = tuple((t["topic"], p) for t in a["assigned_partitions"]
                                   for p in t["partitions"])
            except KwireError:  # an assignment another client encoded its own way
                assignment = ()
        members.append(GroupMember(
            m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"], assignment,
            metadata=bytes(m["member_metadata"]) if m.get("member_metadata") is not None else None,
            assignment_data=bytes(m["member_assignment"]) if m.get("member_assignment") is not None else None))
    return GroupDescription(d["group_id"], d["group_state"], d["protocol_type"], d["protocol_data"],
                            tuple(members), coord)


def _kip848_description(k: Mapping[str, Any], coord: BrokerNode) -> GroupDescription:
    """A ConsumerGroupDescribe entry as a GroupDescription (type "consumer")."""
    topic_ids: dict[str, str] = {}
    members = []
    for m in sorted(k["members"], key=lambda m: m["member_id"]):
        for a in (m.get("assignment"), m.get("target_assignment")):
            for t in (a or {}).get("topic_partitions", ()):
                topic_ids[t["topic_name"]] = str(t["topic_id"])
        members.append(GroupMember(
            m["member_id"], m.get("instance_id"), m["client_id"], m["client_host"],
            _assigned(m.get("assignment")), member_epoch=m["member_epoch"],
            target_assignment=_assigned(m.get("target_assignment")),
            subscribed_topics=tuple(sorted(m.get("subscribed_topic_names") or ())),
            subscribed_regex=m.get("subscribed_topic_regex") or None, rack_id=m.get("rack_id"),
            member_type={0: "classic", 1: "consumer"}.get(m.get("member_type", -1))))
    return GroupDescription(k["group_id"], k["group_state"], "consumer", k["assignor_name"] or "",
                            tuple(members), coord, type="consumer", group_epoch=k["group_epoch"],
                            assignment_epoch=k["assignment_epoch"],
                            topic_ids=tuple(sorted(topic_ids.items())))


def _results(out: dict, raise_on_error: bool) -> dict:
    """``out`` as it is, or with ``raise_on_error`` its first error raised."""
    if raise_on_error:
        for v in out.values():
            if isinstance(v, BaseException):
                raise v
    return out
