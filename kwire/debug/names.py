"""Names for the numbers Kafka puts on the wire: error codes, api keys, acks, isolation levels,
special offsets and timestamps, coordinator key types, config resource types.

:func:`annotate` walks a decoded body and returns a copy in which each named number gets a
sibling key with its name, so JSON keeps the number (what the wire carries) and gains the name::

    {"error_code": 3}                 -> {"error_code": 3, "error": "UNKNOWN_TOPIC_OR_PARTITION"}
    {"acks": -1}                      -> {"acks": -1, "acks_name": "ALL"}
    {"timestamp": -2} (ListOffsets)   -> {"timestamp": -2, "timestamp_name": "EARLIEST"}

``error`` is added beside every ``error_code`` (``partition_error`` beside ``partition_error_code``
and so on), 0 included (``"NONE"``), so scripts find the key on every frame; an unknown code is
named ``"UNKNOWN_CODE_<n>"``.  The other names are added only
where the number has a meaning of its own (``acks``, ``isolation_level``, ``key_type`` always; a
special offset or timestamp only when it is one of the negative markers).

Topic ids (Fetch >= 13 and others carry a UUID instead of the name) are named from a map the
caller builds from the capture's Metadata responses: ``topic_id`` gets a sibling ``topic``.
"""
from __future__ import annotations

import uuid
from typing import Any

from ..protocol import api as P
from ..protocol.error_codes import BY_CODE

__all__ = ["KAFKA_APIS", "Name", "annotate", "api_key_of", "api_name", "error_name", "errors_in", "name_key",
           "NAME_SUFFIX"]

NAME_SUFFIX = "_name"


class Name(str):
    """A name annotate() added (JSON writes it as the string it is; text folds it into its
    number's line, ``acks: -1 (ALL)``).  ``quiet``: text leaves it out (``error_code: 0``)."""

    quiet = False


class _QuietName(Name):
    quiet = True


def name_key(key: str) -> str:
    """The sibling key annotate() gives the name of field ``key``."""
    if key.endswith("error_code"):
        return key[:-5]
    return {"api_key": "api", "topic_id": "topic"}.get(key, key + NAME_SUFFIX)

ACKS = {-1: "ALL", 0: "NONE", 1: "LEADER"}
ISOLATION = {0: "READ_UNCOMMITTED", 1: "READ_COMMITTED"}
COORDINATOR_KEY_TYPE = {0: "GROUP", 1: "TRANSACTION", 2: "SHARE"}
# ListOffsets request timestamps (KIP-734 MAX_TIMESTAMP, KIP-405 the tiered ones, KIP-1005).
LIST_OFFSETS_TIMESTAMP = {-1: "LATEST", -2: "EARLIEST", -3: "MAX_TIMESTAMP", -4: "EARLIEST_LOCAL",
                          -5: "LATEST_TIERED"}
# ConfigResource.Type
RESOURCE_TYPE = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS",
                 32: "GROUP"}
TIMESTAMP_TYPE = {-1: "NO_TIMESTAMP_TYPE", 0: "CREATE_TIME", 1: "LOG_APPEND_TIME"}
CONTROL_TYPE = {0: "ABORT", 1: "COMMIT"}
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")

# Offsets that are markers, not positions, in the fields that can carry them.
_NO_OFFSET = {-1: "NO_OFFSET"}
SPECIAL_OFFSETS = {
    "committed_offset": _NO_OFFSET,   # OffsetFetch: nothing committed
    "last_stable_offset": {-1: "UNKNOWN"},
    "log_start_offset": {-1: "UNKNOWN"},
    "high_watermark": {-1: "UNKNOWN"},
}

_API_KEYS_LIST = 18  # ApiVersions: api_keys[].api_key

# Every api key Kafka defines (org.apache.kafka.common.protocol.ApiKeys, Kafka 4.x), so the APIs
# kwire's tables do not declare (transactions, ACLs, KRaft, share groups...) are still named.
KAFKA_APIS = dict(enumerate((
    "Produce", "Fetch", "ListOffsets", "Metadata", "LeaderAndIsr", "StopReplica", "UpdateMetadata",
    "ControlledShutdown", "OffsetCommit", "OffsetFetch", "FindCoordinator", "JoinGroup", "Heartbeat",
    "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups", "SaslHandshake", "ApiVersions",
    "CreateTopics", "DeleteTopics", "DeleteRecords", "InitProducerId", "OffsetForLeaderEpoch",
    "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
    "DescribeAcls", "CreateAcls", "DeleteAcls", "DescribeConfigs", "AlterConfigs",
    "AlterReplicaLogDirs", "DescribeLogDirs", "SaslAuthenticate", "CreatePartitions",
    "CreateDelegationToken", "RenewDelegationToken", "ExpireDelegationToken",
    "DescribeDelegationToken", "DeleteGroups", "ElectLeaders", "IncrementalAlterConfigs",
    "AlterPartitionReassignments", "ListPartitionReassignments", "OffsetDelete",
    "DescribeClientQuotas", "AlterClientQuotas", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum",
    "AlterPartition", "UpdateFeatures", "Envelope", "FetchSnapshot", "DescribeCluster",
    "DescribeProducers", "BrokerRegistration", "BrokerHeartbeat", "UnregisterBroker",
    "DescribeTransactions", "ListTransactions", "AllocateProducerIds", "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe", "ControllerRegistration", "GetTelemetrySubscriptions", "PushTelemetry",
    "AssignReplicasToDirs", "ListConfigResources", "DescribeTopicPartitions", "ShareGroupHeartbeat",
    "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge", "AddRaftVoter", "RemoveRaftVoter",
    "UpdateRaftVoter", "InitializeShareGroupState", "ReadShareGroupState", "WriteShareGroupState",
    "DeleteShareGroupState", "ReadShareGroupStateSummary", "StreamsGroupHeartbeat",
    "StreamsGroupDescribe", "DescribeShareGroupOffsets", "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets",
)))
_KAFKA_API_KEYS = {name.lower(): key for key, name in KAFKA_APIS.items()}


def api_name(key: int | None) -> str | None:
    """The name of an api key: kwire's tables first, then Kafka's list; None for None."""
    if key is None:
        return None
    a = P.APIS.get(key)
    if a is not None:
        return a.name
    return KAFKA_APIS.get(key, f"UNKNOWN_API_{key}")


def api_key_of(name: str) -> int | None:
    """The api key of a name (any case), from Kafka's list; None when Kafka has no such API."""
    return _KAFKA_API_KEYS.get(name.lower())
_LIST_OFFSETS = 2


def error_name(code: int) -> str:
    entry = BY_CODE.get(code)
    return entry[1] if entry else f"UNKNOWN_CODE_{code}"


def _named(key: str, value: Any, api_key: int | None, kind: str | None) -> tuple[str, str | None] | None:
    """(sibling key, name) for one field, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if key.endswith("error_code"):  # error_code, partition_error_code...
        return key[:-5], error_name(value)
    if key == "acks" and api_key == 0:
        return key + NAME_SUFFIX, ACKS.get(value, f"{value} (invalid)")
    if key == "isolation_level":
        return key + NAME_SUFFIX, ISOLATION.get(value, f"UNKNOWN_{value}")
    if key == "key_type":
        return key + NAME_SUFFIX, COORDINATOR_KEY_TYPE.get(value, f"UNKNOWN_{value}")
    if key == "resource_type":
        return key + NAME_SUFFIX, RESOURCE_TYPE.get(value, f"UNKNOWN_{value}")
    if key == "timestamp" and api_key == _LIST_OFFSETS and kind == "request" and value < 0:
        return key + NAME_SUFFIX, LIST_OFFSETS_TIMESTAMP.get(value, f"UNKNOWN_{value}")
    if key == "api_key" and api_key == _API_KEYS_LIST:
        return "api", api_name(value)
    special = SPECIAL_OFFSETS.get(key)
    if special is not None and value in special:
        return key + NAME_SUFFIX, special[value]
    return None


def annotate(body: Any, api_key: int | None, kind: str | None,
             topic_names: dict[uuid.UUID, str] | None = None) -> Any:
    """A copy of ``body`` with names beside the numbers (see the module doc).  Values that are
    not plain dicts/lists (record summaries, embedded payloads) are kept as they are."""
    if type(body) is dict:
        out = {}
        for k, v in body.items():
            out[k] = annotate(v, api_key, kind, topic_names)
            named = _named(k, v, api_key, kind)
            if named is not None and named[0] not in body:
                quiet = k.endswith("error_code") and v == 0
                out[named[0]] = (_QuietName if quiet else Name)(named[1])
            elif k == "topic_id" and topic_names and isinstance(v, uuid.UUID) and "topic" not in body \
                    and "name" not in body:
                found = topic_names.get(v)
                if found is not None:
                    out["topic"] = Name(found)
        return out
    if type(body) is list:
        return [annotate(v, api_key, kind, topic_names) for v in body]
    return body


def errors_in(body: Any) -> list[int]:
    """Every non-zero ``error_code`` anywhere in a body, in order."""
    found: list[int] = []

    def walk(v: Any) -> None:  # plain dicts and lists only: record summaries (dict subclasses) hold no codes
        if type(v) is dict:
            for k, x in v.items():
                if k.endswith("error_code") and isinstance(x, int) and x != 0:
                    found.append(x)
                elif type(x) is dict or type(x) is list:
                    walk(x)
        elif type(v) is list:
            for x in v:
                walk(x)

    walk(body)
    return found
