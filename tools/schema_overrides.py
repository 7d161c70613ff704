"""kwire's corrections to the Kafka message specs, applied by tools/transcribe_schema.py.

Empty since the table is transcribed from Kafka 4.3.1's own specs (the jar named in the
header of kwire/protocol/messages.py): the hand overrides that brought the Oct-2024 specs up
to Kafka 4.2 (Produce/OffsetCommit/OffsetFetch topic ids, Fetch v18, Metadata v13, ...) are
all in 4.3.1's files, and the versions Kafka 4.0 removed now come from the 3.9.1 specs
(``--legacy``), checked plan by plan.  Keep corrections here, as data, if a spec is ever wrong
or behind a broker kwire must speak to.

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

Each entry names the KIP or Kafka release it comes from.  Fields that end up outside the
valid versions need no "remove": the transcriber drops them and trims every range.
"""

OVERRIDES: dict[str, dict] = {
    # Kafka's spec says the assignment is never null, and Kafka never sends null; a broker that
    # does on an error answer (seen from a hostile test broker) made the strict decoder fail the
    # whole answer and lose its error code (REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ...).
    # Decoding null keeps it (issue 14, defect 11).
    "SyncGroupResponse": {
        "notes": ["kwire: a null Assignment is accepted (Kafka sends empty bytes, never null; a "
                  "broker that sends null with an error code keeps its error code)."],
        "fields": [{"op": "set", "path": "Assignment", "nullableVersions": "0+"}],
    },
}
