"""kwire's corrections to the Kafka message specs, applied by tools/transcribe_schema.py.

The spec files we transcribe from may predate the protocol we target (Kafka 4.2).  Every
change made to them since is recorded here, as data, so that ``messages.py`` is reproducible
from "spec files + this file".  Each entry names the KIP or Kafka release it comes from.

Per message (keyed by the spec's message name):

    "valid":    new validVersions
    "flexible": new flexibleVersions
    "notes":    version-history lines appended to the spec's own (kwire's wording)
    "fields":   edits, applied in order; ``path`` is dot-separated field names from the top:
        {"op": "add", "path": STRUCT_PATH ("" = top level), "after"/"before": NAME,
         "field": {spec-style field: name, type, versions, nullableVersions, taggedVersions,
                   tag, default (a spec-style string), flexibleVersions, fields}}
        {"op": "set", "path": FIELD_PATH, <spec-style key>: value, ...}
        {"op": "remove", "path": FIELD_PATH}

Fields that end up outside the valid versions (e.g. v0-only fields once v0 is removed) need
no "remove": the transcriber drops them and trims every range to the valid versions.

Where references disagree on the oldest version still served we keep the older one (a 4.x
broker may serve it, and a debugging tool may see older frames); such choices are noted.
"""

_KIP896 = "Kafka 4.0 removed versions older than v{} (KIP-896)."

OVERRIDES = {
    # ---------------------------------------------------------------- Produce (0)
    "ProduceRequest": {
        # KIP-896 (4.0): v0-2 removed.  v12: KIP-890 part 2 (4.0), no schema change.
        # v13: topic IDs instead of names (KIP-516, Kafka 4.1).
        "valid": "3-13",
        "fields": [
            {"op": "set", "path": "TopicData.Name", "versions": "0-12"},
            {"op": "add", "path": "TopicData", "after": "Name",
             "field": {"name": "TopicId", "type": "uuid", "versions": "13+"}},
        ],
        "notes": [
            _KIP896.format(3),
            "Version 12 (Kafka 4.0) is the same as 11; it signals transaction version 2 "
            "support (KIP-890).",
            "Version 13 (Kafka 4.1) identifies topics by TopicId instead of Name (KIP-516).",
        ],
    },
    "ProduceResponse": {
        "valid": "3-13",
        "fields": [
            {"op": "set", "path": "Responses.Name", "versions": "0-12"},
            {"op": "add", "path": "Responses", "after": "Name",
             "field": {"name": "TopicId", "type": "uuid", "versions": "13+"}},
        ],
        "notes": [
            _KIP896.format(3),
            "Version 12 (Kafka 4.0) is the same as 11 (KIP-890).",
            "Version 13 (Kafka 4.1) identifies topics by TopicId instead of Name (KIP-516).",
        ],
    },
    # ---------------------------------------------------------------- Fetch (1)
    "FetchRequest": {
        # KIP-896 (4.0): v0-3 removed.  v18 (Kafka 4.1, KIP-1166): followers report their
        # high watermark, a tagged field in each FetchPartition.
        "valid": "4-18",
        "fields": [
            {"op": "add", "path": "Topics.Partitions", "after": "ReplicaDirectoryId",
             "field": {"name": "HighWatermark", "type": "int64", "versions": "18+",
                       "taggedVersions": "18+", "tag": 1,
                       "default": "9223372036854775807"}},
        ],
        "notes": [
            _KIP896.format(4),
            "Version 18 (Kafka 4.1) adds the follower's HighWatermark as tagged field 1 of "
            "each partition; -1 = unknown, int64 max = not supported (KIP-1166).",
        ],
    },
    "FetchResponse": {
        "valid": "4-18",
        "notes": [
            _KIP896.format(4),
            "Version 18 (Kafka 4.1) is the same as 17 (KIP-1166).",
        ],
    },
    # ---------------------------------------------------------------- ListOffsets (2)
    "ListOffsetsRequest": {
        # KIP-896 (4.0): v0 removed (and with it MaxNumOffsets).  v11 (Kafka 4.2,
        # KIP-1023): timestamp -6 = earliest pending upload offset; no schema change.
        "valid": "1-11",
        "notes": [
            _KIP896.format(1),
            "Version 11 (Kafka 4.2) accepts timestamp -6, the earliest pending-upload "
            "offset (KIP-1023); the schema is unchanged.",
        ],
    },
    "ListOffsetsResponse": {
        # v0's OldStyleOffsets goes away with v0.
        "valid": "1-11",
        "notes": [
            _KIP896.format(1),
            "Version 11 (Kafka 4.2) is the same as 10 (KIP-1023).",
        ],
    },
    # ---------------------------------------------------------------- Metadata (3)
    "MetadataRequest": {
        # v13 (Kafka 4.0, KIP-1102): request unchanged.  v0-3 were deprecated but are
        # still valid in 4.x specs (not removed by KIP-896).
        "valid": "0-13",
        "notes": [
            "Version 13 (Kafka 4.0) is the same as 12; the response gains a top-level "
            "ErrorCode (KIP-1102).",
        ],
    },
    "MetadataResponse": {
        "valid": "0-13",
        "fields": [
            # KIP-1102 (Kafka 4.0): lets the broker tell the client to rebootstrap.
            {"op": "add", "path": "", "field":
                {"name": "ErrorCode", "type": "int16", "versions": "13+"}},
        ],
        "notes": [
            "Version 13 (Kafka 4.0) adds a top-level ErrorCode, e.g. to ask the client to "
            "rebootstrap (KIP-1102).",
        ],
    },
    # ---------------------------------------------------------------- OffsetCommit (8)
    "OffsetCommitRequest": {
        # KIP-896 (4.0): v0-1 removed.  v10 (Kafka 4.2, KIP-848): topics by ID.
        "valid": "2-10",
        "fields": [
            {"op": "set", "path": "Topics.Name", "versions": "0-9"},
            {"op": "add", "path": "Topics", "after": "Name",
             "field": {"name": "TopicId", "type": "uuid", "versions": "10+"}},
        ],
        "notes": [
            _KIP896.format(2),
            "Version 10 (Kafka 4.2) identifies topics by TopicId instead of Name (KIP-848).",
        ],
    },
    "OffsetCommitResponse": {
        "valid": "2-10",
        "fields": [
            {"op": "set", "path": "Topics.Name", "versions": "0-9"},
            {"op": "add", "path": "Topics", "after": "Name",
             "field": {"name": "TopicId", "type": "uuid", "versions": "10+"}},
        ],
        "notes": [
            _KIP896.format(2),
            "Version 10 (Kafka 4.2) identifies topics by TopicId instead of Name (KIP-848).",
        ],
    },
    # ---------------------------------------------------------------- OffsetFetch (9)
    "OffsetFetchRequest": {
        # KIP-896 (4.0): v0 removed.  v10 (Kafka 4.2, KIP-848): topics by ID.
        "valid": "1-10",
        "fields": [
            {"op": "set", "path": "Groups.Topics.Name", "versions": "8-9"},
            {"op": "add", "path": "Groups.Topics", "after": "Name",
             "field": {"name": "TopicId", "type": "uuid", "versions": "10+"}},
        ],
        "notes": [
            _KIP896.format(1),
            "Version 10 (Kafka 4.2) identifies topics by TopicId instead of Name (KIP-848).",
        ],
    },
    "OffsetFetchResponse": {
        "valid": "1-10",
        "fields": [
            {"op": "set", "path": "Groups.Topics.Name", "versions": "8-9"},
            {"op": "add", "path": "Groups.Topics", "after": "Name",
             "field": {"name": "TopicId", "type": "uuid", "versions": "10+"}},
        ],
        "notes": [
            _KIP896.format(1),
            "Version 10 (Kafka 4.2) identifies topics by TopicId instead of Name (KIP-848).",
        ],
    },
    # ---------------------------------------------------------------- JoinGroup (11)
    # No change: 0-9.  v0-1 were marked deprecated before 4.0, but the 4.x specs still
    # list them as valid (KIP-896 did not remove them); we keep them.
    "JoinGroupRequest": {
        "notes": [
            "kwire keeps v0-1: deprecated, but still valid in the Kafka 4.x specs.",
        ],
    },
    "JoinGroupResponse": {
        "notes": [
            "kwire keeps v0-1: deprecated, but still valid in the Kafka 4.x specs.",
        ],
    },
    # ---------------------------------------------------------------- DescribeGroups (15)
    "DescribeGroupsRequest": {
        # v6 (Kafka 4.0, KIP-1043): request unchanged.
        "valid": "0-6",
        "notes": [
            "Version 6 (Kafka 4.0) is the same as 5; the response gains a per-group "
            "ErrorMessage (KIP-1043).",
        ],
    },
    "DescribeGroupsResponse": {
        "valid": "0-6",
        "fields": [
            # KIP-1043 (Kafka 4.0).
            {"op": "add", "path": "Groups", "after": "ErrorCode",
             "field": {"name": "ErrorMessage", "type": "string", "versions": "6+",
                       "nullableVersions": "6+", "default": "null"}},
        ],
        "notes": [
            "Version 6 (Kafka 4.0) adds a per-group ErrorMessage; GROUP_ID_NOT_FOUND for "
            "unknown groups (KIP-1043).",
        ],
    },
    # ---------------------------------------------------------------- CreateTopics (19)
    "CreateTopicsRequest": {
        # KIP-896 (4.0): v0-1 removed.
        "valid": "2-7",
        "notes": [_KIP896.format(2)],
    },
    "CreateTopicsResponse": {
        "valid": "2-7",
        "notes": [_KIP896.format(2)],
    },
    # ---------------------------------------------------------------- InitProducerId (22)
    # Kept at 0-5.  v6 (KIP-939, two-phase commit; Kafka 4.1) is in the specs but shipped
    # as an unstable version that brokers do not advertise by default.
    "InitProducerIdRequest": {
        "notes": [
            "kwire stops at v5: v6 (KIP-939, 2PC) ships as an unstable version in 4.1/4.2.",
        ],
    },
    "InitProducerIdResponse": {
        "notes": [
            "kwire stops at v5: v6 (KIP-939, 2PC) ships as an unstable version in 4.1/4.2.",
        ],
    },
    # ---------------------------------------------------------------- OffsetForLeaderEpoch (23)
    "OffsetForLeaderEpochRequest": {
        # KIP-896 (4.0): v0-1 removed.
        "valid": "2-4",
        "notes": [_KIP896.format(2)],
    },
    "OffsetForLeaderEpochResponse": {
        "valid": "2-4",
        "notes": [_KIP896.format(2)],
    },
    # ---------------------------------------------------------------- headers
    "RequestHeader": {
        # Header v0 (no ClientId) only served ControlledShutdown v0, removed in 4.0
        # (KIP-896); the 4.x specs list 1-2.  kwire keeps 0-2 so that a debugging tool can
        # still encode and read a v0 header when told to.
        "valid": "0-2",
        "notes": [
            "Kafka 4.0 dropped header v0, used only by ControlledShutdown v0 (KIP-896); kwire "
            "keeps it readable.",
        ],
    },
    # ------------------------------------------------- client telemetry (71, 72)
    "GetTelemetrySubscriptionsRequest": {"notes": [
        "Version 0 (Kafka 3.7, KIP-714) is the first: the client asks which metrics to push."]},
    "GetTelemetrySubscriptionsResponse": {"notes": [
        "Version 0 (Kafka 3.7, KIP-714) is the first."]},
    "PushTelemetryRequest": {"notes": [
        "Version 0 (Kafka 3.7, KIP-714) is the first: the client pushes encoded metrics."]},
    "PushTelemetryResponse": {"notes": [
        "Version 0 (Kafka 3.7, KIP-714) is the first."]},
}
