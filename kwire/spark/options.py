"""The options of kwire's Spark source, checked once, on the driver.

They mirror the option names of Spark's Kafka source, so a job moves over by changing
``format("kafka")`` to ``format("kwire")``:

=================================  ===========================================================
``kafka.bootstrap.servers``        required
``subscribe``                      comma-separated topics          } exactly one of
``subscribePattern``               a regular expression (full match) } these three
``assign``                         JSON ``{"topic": [0, 1]}``        }
``startingOffsets``                ``earliest`` | ``latest`` | ``group`` | JSON
                                   ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest)
``endingOffsets``                  ``latest`` | JSON (batch only; -1 latest)
``startingOffsetsByTimestamp``     JSON ``{"topic": {"0": 1700000000000}}`` (ms)
``endingOffsetsByTimestamp``       JSON, as above (batch only)
``startingTimestamp``              one timestamp (ms) for every partition
``endingTimestamp``                one timestamp (ms) for every partition (batch only)
``startingOffsetsByTimestampStrategy``  ``error`` (default) | ``latest``: what a partition
                                   with no record at or after its starting timestamp does
``minPartitions``                  split ranges so at least this many Spark partitions
``maxRecordsPerPartition``         split ranges so none holds more offsets than this
``maxOffsetsPerTrigger``           streaming: at most this many offsets per micro-batch
``maxPartitions``                  kwire's own: pack the ranges into at most this many Spark
                                   partitions (see below)
``failOnDataLoss``                 ``true`` (default) | ``false``: skip, with a warning, offsets
                                   that are gone instead of failing
``includeHeaders``                 ``false`` (default) | ``true``: add the ``headers`` column
``kafkaConsumer.pollTimeoutMs``    how long an executor waits for a range's records (120000)
``fetchOffset.numRetries``         driver retries of offset look-ups (3)
``fetchOffset.retryIntervalMs``    wait between those retries (10)
``kafka.<property>``               any kwire configuration property (see ``kwire.config``)
=================================  ===========================================================

kwire's own:

* Read tasks ask for 4 MiB of their partition per Fetch unless ``kafka.max.partition.fetch.bytes``
  is given (with Java's 1 MiB a task mostly waited on the broker's turnaround); a task holds at
  most two answers.
* ``startingOffsets=group`` starts each partition at the committed offset of the consumer group
  ``kafka.group.id`` (or ``commitToGroup``), like Flink's GROUP_OFFSETS start mode; a partition
  without one starts per ``kafka.auto.offset.reset`` (earliest / latest / error).
* ``maxPartitions=N`` packs the planned ranges into at most ``N`` Spark partitions of even
  record counts, each task reading its ranges in turn (:func:`kwire.spark.planner.pack_ranges`):
  a Spark task costs tens of milliseconds before it reads anything, so a topic with more
  partitions than the cluster has cores reads faster with ``N`` = the number of cores.  Spark's
  source has no such option (a task per topic partition at least); it cannot be combined with
  ``minPartitions`` or ``maxRecordsPerPartition``, which split ranges instead.
* With none of ``minPartitions``, ``maxRecordsPerPartition`` and ``maxPartitions``, a batch
  read (``read_kafka``, ``map_kafka_arrow``) evens its tasks out over the cluster's cores
  (``defaultParallelism``): when the partitions are not a multiple of the cores, the largest
  ranges are cut so the parts are, none below 500,000 offsets
  (:func:`kwire.spark.planner.balance_ranges`).  Three partitions on two cores read as four
  parts, not as two tasks and then one task alone.  In local mode, where the cores are known,
  more parts than cores are then packed into one task per core, as ``maxPartitions`` does
  (:func:`kwire.spark.planner.batch_layout`): four partitions on ``local[2]`` read as two
  tasks.  ``minPartitions=1`` keeps Spark's layout (a task per topic partition);
  ``spark.read.format("kwire")`` plans without knowing the cores and keeps it too.
* ``commitToGroup=<group.id>`` commits the end offsets of what was read to that group once the
  Spark job succeeded (streaming: after each micro-batch).  It is the "simple" commit, with no
  group membership (generation -1), which brokers accept while the group has no active members.

Differences from Spark, on purpose: options that contradict each other (two starting
positions, ``kafka.enable.auto.commit=true``) are errors instead of one silently winning; and
``kafka.isolation.level`` defaults to kwire's (read_committed), not the Java client's.

Option names are case-insensitive, as in Spark.  Every problem raises
:class:`~kwire.errors.ConfigError` naming the option.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import Config, parse_config
from ..errors import ConfigError

__all__ = ["OffsetSpec", "SourceOptions", "parse_options", "EARLIEST", "LATEST"]

EARLIEST = -2
LATEST = -1

TP = tuple[str, int]  # (topic, partition)

# canonical option names (Spark's spelling); looked up case-insensitively
_OPTIONS = (
    "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestampStrategy",
    "minPartitions", "maxRecordsPerPartition", "maxOffsetsPerTrigger", "maxPartitions",
    "failOnDataLoss", "includeHeaders",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "commitToGroup",
)
_CANONICAL = {name.lower(): name for name in _OPTIONS}

# Kafka properties that make no sense for a source that plans its own offsets.
_REFUSED_KAFKA = {
    "enable.auto.commit": "the source never auto-commits; use commitToGroup to commit after the job",
    "enable.auto.offset.store": "the source stores no offsets; use commitToGroup",
    "group.instance.id": "the source does not join a group",
}


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    ``kind``: ``earliest`` | ``latest`` | ``group`` | ``offsets`` (per-partition ``offsets``,
    where -2 / -1 mean earliest / latest) | ``timestamps`` (per-partition ``timestamps``) |
    ``timestamp`` (one ``timestamp`` for every partition).  Partitions a per-partition spec
    does not name use ``default`` (``earliest`` or ``latest``).
    """

    kind: str
    offsets: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset)
    timestamps: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, timestamp_ms)
    timestamp: int | None = None
    default: str = "earliest"

    def offsets_map(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.offsets}

    def timestamps_map(self) -> dict[tuple[str, int], int]:
        return {(t, p): ts for t, p, ts in self.timestamps}

    def named_partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, p, _ in self.offsets} | {(t, p) for t, p, _ in self.timestamps}

    def to_json(self) -> str:
        """The option value that reproduces this spec (for messages and logs)."""
        if self.kind in ("earliest", "latest", "group"):
            return self.kind
        if self.kind == "timestamp":
            return str(self.timestamp)
        items = self.offsets if self.kind == "offsets" else self.timestamps
        out: dict[str, dict[str, int]] = {}
        for t, p, v in items:
            out.setdefault(t, {})[str(p)] = v
        return json.dumps(out, sort_keys=True)


@dataclass(frozen=True)
class SourceOptions:
    """Parsed, checked options.  Picklable: executors receive it."""

    kafka: Mapping[str, Any]  # kwire configuration properties (without the "kafka." prefix)
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    starting_timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    max_partitions: int | None = None  # pack ranges into at most this many Spark partitions
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    group_id: str | None = None  # whose committed offsets startingOffsets=group reads
    commit_group: str | None = None
    streaming: bool = False
    given: Mapping[str, str] = field(default_factory=dict)  # what the user passed (canonical names)

    @property
    def bootstrap_servers(self) -> str:
        servers = self.kafka.get("bootstrap.servers")
        return ",".join(servers) if isinstance(servers, (list, tuple)) else str(servers)

    @property
    def auto_offset_reset(self) -> str:
        reset: str = self.config().auto_offset_reset
        return reset

    @property
    def isolation_level(self) -> int:
        """The ListOffsets / Fetch isolation level: 0 read_uncommitted, 1 read_committed."""
        return 1 if self.config().isolation_level == "read_committed" else 0

    def config(self) -> Config:
        return parse_config(dict(self.kafka), role="consumer")

    def describe_subscription(self) -> str:
        if self.subscribe:
            return "subscribe=" + ",".join(self.subscribe)
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        topics: dict[str, list[int]] = {}
        for t, p in self.assign:
            topics.setdefault(t, []).append(p)
        return "assign=" + json.dumps(topics, sort_keys=True)


# --- parsing ------------------------------------------------------------------------------------

def _text(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    raise ConfigError(f"option {name!r}: expected a string, got {type(value).__name__}")


def _bool(name: str, value: str) -> bool:
    v = value.lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"option {name!r}: expected true or false, got {value!r}")


def _int(name: str, value: str, minimum: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"option {name!r}: expected an integer, got {value!r}") from None
    if n < minimum:
        raise ConfigError(f"option {name!r}: must be at least {minimum}, got {n}")
    return n


def _json_object(name: str, value: str, example: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name!r}: malformed JSON ({exc.msg} at character {exc.pos}) in "
                          f"{value!r}; expected e.g. {example}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"option {name!r}: expected a JSON object like {example}, got {value!r}")
    return obj


_OFFSETS_EXAMPLE = '{"topic": {"0": 23, "1": -2}}'
_TS_EXAMPLE = '{"topic": {"0": 1700000000000}}'


def _per_partition(name: str, value: str, example: str,
                   check: Callable[[str, int, int], None]) -> tuple[tuple[str, int, int], ...]:
    obj = _json_object(name, value, example)
    out = []
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name!r}: topic {topic!r} must map partition numbers to "
                              f"values, e.g. {example}")
        for p, v in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                partition = -1
            if partition < 0 or str(partition) != str(p).strip():
                raise ConfigError(f"option {name!r}: {p!r} of topic {topic!r} is not a partition "
                                  "number")
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"option {name!r}: the value for {topic}-{partition} must be an "
                                  f"integer, got {v!r}")
            check(topic, partition, v)
            out.append((topic, partition, v))
    if not out:
        raise ConfigError(f"option {name!r}: names no partition; expected e.g. {example}")
    return tuple(sorted(out))


def _offsets_spec(name: str, value: str, *, ending: bool, streaming: bool) -> OffsetSpec:
    v = value.lower()
    if v == "earliest":
        if ending:
            raise ConfigError(f"option {name!r}: 'earliest' is not allowed as an ending offset")
        return OffsetSpec("earliest")
    if v == "latest":
        if not ending and not streaming:
            raise ConfigError(f"option {name!r}: 'latest' is not allowed for a batch query (it "
                              "would read nothing); use it with readStream")
        return OffsetSpec("latest")
    if v == "group":
        if ending:
            raise ConfigError(f"option {name!r}: 'group' is a starting position only")
        return OffsetSpec("group")
    if not v.startswith(("{", "[")):
        raise ConfigError(f"option {name!r}: expected earliest, latest"
                          f"{'' if ending else ', group'} or JSON like {_OFFSETS_EXAMPLE}, "
                          f"got {value!r}")

    def check(topic: str, partition: int, offset: int) -> None:
        if offset < -2:
            raise ConfigError(f"option {name!r}: offset {offset} for {topic}-{partition} is "
                              "invalid (use -2 for earliest, -1 for latest, or an offset >= 0)")
        if ending and offset == EARLIEST:
            raise ConfigError(f"option {name!r}: -2 (earliest) is not allowed as an ending "
                              f"offset ({topic}-{partition})")
        if not ending and not streaming and offset == LATEST:
            raise ConfigError(f"option {name!r}: -1 (latest) is not allowed as a starting offset "
                              f"of a batch query ({topic}-{partition})")

    offsets = _per_partition(name, value, _OFFSETS_EXAMPLE, check)
    return OffsetSpec("offsets", offsets=offsets, default="latest" if ending else "earliest")


def _timestamps_spec(name: str, value: str, *, ending: bool) -> OffsetSpec:
    def check(topic: str, partition: int, ts: int) -> None:
        if ts < 0:
            raise ConfigError(f"option {name!r}: timestamp {ts} for {topic}-{partition} must be "
                              ">= 0 (milliseconds since the epoch)")

    ts = _per_partition(name, value, _TS_EXAMPLE, check)
    return OffsetSpec("timestamps", timestamps=ts, default="latest" if ending else "earliest")


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigError(f"option 'subscribePattern': invalid regular expression {value!r}: {exc}") from None
    return value


def _assign(value: str) -> tuple[tuple[str, int], ...]:
    example = '{"topicA": [0, 1], "topicB": [2]}'
    obj = _json_object("assign", value, example)
    out: set[tuple[str, int]] = set()
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                  and p >= 0 for p in parts):
            raise ConfigError(f"option 'assign': topic {topic!r} must map to a list of partition "
                              f"numbers, e.g. {example}")
        out.update((topic, p) for p in parts)
    if not out:
        raise ConfigError(f"option 'assign': names no partition; expected e.g. {example}")
    return tuple(sorted(out))


def parse_options(options: Mapping[str, Any], *, streaming: bool = False) -> SourceOptions:
    """Check the source options (``kafka.*`` included) and return :class:`SourceOptions`.

    ``streaming`` selects the rules of readStream (``endingOffsets`` refused, ``latest`` allowed
    as a start) versus read (the reverse).
    """
    given: dict[str, str] = {}
    kafka: dict[str, Any] = {}
    for raw_name, raw_value in dict(options).items():
        if not isinstance(raw_name, str):
            raise ConfigError(f"option names are strings, got {raw_name!r}")
        name = raw_name.strip()
        if name.lower().startswith("kafka."):
            prop = name[len("kafka."):]
            kafka[prop] = raw_value
            continue
        canonical = _CANONICAL.get(name.lower())
        if canonical is None:
            raise ConfigError(f"unknown option {raw_name!r} for the kwire Spark source; known: "
                              f"{', '.join(_OPTIONS)} and kafka.<property>")
        if raw_value is None:
            continue
        given[canonical] = _text(canonical, raw_value)

    # kafka.* -> kwire configuration (unknown properties and bad values named with their prefix)
    for prop, why in _REFUSED_KAFKA.items():
        if prop in kafka:
            if prop == "enable.auto.commit" and str(kafka[prop]).strip().lower() in ("false", "0", "no", "off"):
                kafka.pop(prop)
                continue
            raise ConfigError(f"option 'kafka.{prop}' is not supported: {why}")
    try:
        cfg = parse_config(kafka, role="consumer")
    except ConfigError as exc:
        raise ConfigError(f"{exc} (given as a kafka.* option of the kwire Spark source)") from None
    if not cfg.bootstrap_servers:
        raise ConfigError("option 'kafka.bootstrap.servers' is required")

    # what to read
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n in given]
    if len(chosen) != 1:
        raise ConfigError("exactly one of the options 'subscribe', 'subscribePattern', 'assign' is "
                          f"required{'; got ' + ', '.join(chosen) if chosen else ''}")
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: tuple[tuple[str, int], ...] = ()
    if "subscribe" in given:
        subscribe = tuple(dict.fromkeys(t.strip() for t in given["subscribe"].split(",") if t.strip()))
        if not subscribe:
            raise ConfigError("option 'subscribe': names no topic")
    elif "subscribePattern" in given:
        pattern = _pattern(given["subscribePattern"])
    else:
        assign = _assign(given["assign"])

    # where to start
    starts = [n for n in ("startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp") if n in given]
    if len(starts) > 1:
        raise ConfigError(f"options {', '.join(starts)} all set a starting position; give one")
    if "startingTimestamp" in given:
        starting = OffsetSpec("timestamp", timestamp=_int("startingTimestamp", given["startingTimestamp"], 0))
    elif "startingOffsetsByTimestamp" in given:
        starting = _timestamps_spec("startingOffsetsByTimestamp", given["startingOffsetsByTimestamp"], ending=False)
    elif "startingOffsets" in given:
        starting = _offsets_spec("startingOffsets", given["startingOffsets"], ending=False, streaming=streaming)
    else:
        starting = OffsetSpec("latest" if streaming else "earliest")

    # where to end
    ends = [n for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp") if n in given]
    if streaming and ends:
        raise ConfigError(f"option {ends[0]!r} is for batch queries only; a stream has no end")
    if len(ends) > 1:
        raise ConfigError(f"options {', '.join(ends)} all set an ending position; give one")
    if "endingTimestamp" in given:
        ending = OffsetSpec("timestamp", timestamp=_int("endingTimestamp", given["endingTimestamp"], 0),
                            default="latest")
    elif "endingOffsetsByTimestamp" in given:
        ending = _timestamps_spec("endingOffsetsByTimestamp", given["endingOffsetsByTimestamp"], ending=True)
    elif "endingOffsets" in given:
        ending = _offsets_spec("endingOffsets", given["endingOffsets"], ending=True, streaming=streaming)
    else:
        ending = OffsetSpec("latest")

    strategy = given.get("startingOffsetsByTimestampStrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ConfigError("option 'startingOffsetsByTimestampStrategy': expected error or latest, "
                          f"got {given['startingOffsetsByTimestampStrategy']!r}")

    max_per_trigger = None
    if "maxOffsetsPerTrigger" in given:
        if not streaming:
            raise ConfigError("option 'maxOffsetsPerTrigger' is for streaming queries (readStream) only")
        max_per_trigger = _int("maxOffsetsPerTrigger", given["maxOffsetsPerTrigger"], 1)

    max_partitions = _int("maxPartitions", given["maxPartitions"], 1) if "maxPartitions" in given else None
    if max_partitions is not None:
        for other in ("minPartitions", "maxRecordsPerPartition"):
            if other in given:
                raise ConfigError(f"option 'maxPartitions' packs ranges into fewer Spark partitions and "
                                  f"'{other}' splits them: use one or the other")

    commit_group = given.get("commitToGroup") or None
    group_id = cfg.group_id or commit_group
    if starting.kind == "group" and not group_id:
        raise ConfigError("option startingOffsets=group needs a group: set 'kafka.group.id' "
                          "(or 'commitToGroup')")

    return SourceOptions(
        kafka=dict(cfg.user),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp_strategy=strategy,
        min_partitions=_int("minPartitions", given["minPartitions"], 1) if "minPartitions" in given else None,
        max_records_per_partition=(_int("maxRecordsPerPartition", given["maxRecordsPerPartition"], 1)
                                   if "maxRecordsPerPartition" in given else None),
        max_offsets_per_trigger=max_per_trigger,
        max_partitions=max_partitions,
        fail_on_data_loss=_bool("failOnDataLoss", given.get("failOnDataLoss", "true")),
        include_headers=_bool("includeHeaders", given.get("includeHeaders", "false")),
        poll_timeout_ms=_int("kafkaConsumer.pollTimeoutMs", given.get("kafkaConsumer.pollTimeoutMs", "120000"), 1),
        fetch_offset_num_retries=_int("fetchOffset.numRetries", given.get("fetchOffset.numRetries", "3"), 0),
        fetch_offset_retry_interval_ms=_int("fetchOffset.retryIntervalMs",
                                            given.get("fetchOffset.retryIntervalMs", "10"), 0),
        group_id=group_id,
        commit_group=commit_group,
        streaming=streaming,
        given=dict(given),
    )
