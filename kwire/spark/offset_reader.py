"""Driver-side cluster look-ups for the Spark source: partitions, offsets, group commits.

:class:`OffsetReader` owns one :class:`~kwire.net.NetworkClient` and answers the questions
planning asks -- which partitions are read, their earliest / latest offsets, the offsets for
timestamps, a group's committed offsets -- then hands the answers (plain dicts) to the pure
functions of :mod:`kwire.spark.planner`.  It also commits a plan's end offsets for
``commitToGroup``.

Requests, each sent where Kafka wants it::

    Metadata         any broker       topics, partitions, leaders, topic ids
    ListOffsets      partition leader timestamp -2 earliest, -1 latest, >= 0 first offset at/after
    FindCoordinator  any broker       the group's coordinator (key_type 0)
    OffsetFetch      coordinator      committed offsets (-1: none)
    OffsetCommit     coordinator      generation -1, member "": the commit of a client outside
                                      the group, accepted while the group has no live members

Metadata is this reader's own; every other request goes through :class:`kwire.admin.Admin`
on the same connections (Admin asks again after a moved leader or a loading coordinator
within the request timeout).  Retriable errors that remain refresh metadata and retry, up to
``fetchOffset.numRetries`` times.
"""
from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..admin import Admin
from ..consumer.types import OffsetAndMetadata
from ..errors import (
    BrokerError,
    CommitFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    KwireError,
    for_code,
)
from ..net import NetworkClient
from ..protocol.schema import ZERO_UUID
from . import planner
from .options import SourceOptions

__all__ = ["OffsetReader", "UnreachableClusterError", "lookup_topic_ids"]

_log = logging.getLogger("kwire.spark")

TP = tuple[str, int]  # (topic, partition)
_T = TypeVar("_T")

_UNKNOWN_TOPIC_OR_PARTITION = 3
_COORDINATOR_ERRORS = {14, 15, 16}  # loading, not available, not coordinator
_INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state"}


class UnreachableClusterError(KafkaConnectionError):
    """No broker of ``kafka.bootstrap.servers`` answered."""


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, BrokerError):
        return exc.retriable or exc.invalid_metadata or exc.code in _COORDINATOR_ERRORS
    return isinstance(exc, (KafkaConnectionError, KafkaTimeoutError))


class OffsetReader:
    """Look-ups for one query, over one connection pool.  Use as a context manager."""

    def __init__(self, options: SourceOptions, *, client: NetworkClient | None = None):
        self.options = options
        self._client = client
        self._config = options.config()
        self._coordinators: dict[str, int] = {}
        self._admin: Admin | None = None

    # --- connection ---------------------------------------------------------------------------
    @property
    def client(self) -> NetworkClient:
        if self._client is None:
            client = NetworkClient(self._config)
            try:
                client.ensure_ready(None)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                client.close()
                raise UnreachableClusterError(
                    f"cannot reach Kafka at kafka.bootstrap.servers="
                    f"{self.options.bootstrap_servers}: {exc}") from None
            self._client = client
        return self._client

    @property
    def admin(self) -> Admin:
        """Admin over the same connections: the group look-ups and log bounds live there."""
        if self._admin is None:
            self._admin = Admin(self._config, network=self.client)
        return self._admin

    def close(self) -> None:
        client, self._client = self._client, None
        self._admin = None
        if client is not None:
            client.close()

    def __enter__(self) -> OffsetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retrying(self, what: str, fn: Callable[[], _T]) -> _T:
        """``fn()``, retried on retriable errors with a metadata refresh in between:
        ``fetchOffset.numRetries`` times (Spark's option), except that a group coordinator that
        is loading, unavailable or moved is waited for until ``request.timeout.ms`` has passed
        -- a coordinator loading its offsets (a fresh or restarted broker) takes seconds, which
        a few 100 ms retries do not cover (Kafka's Java client waits for it the same way)."""
        attempts = self.options.fetch_offset_num_retries + 1
        pause_s = max(self.options.fetch_offset_retry_interval_ms, self._config.retry_backoff_ms) / 1000
        coordinator_deadline = time.monotonic() + self._config.request_timeout_ms / 1000
        attempt = 0
        while True:
            try:
                return fn()
            except KwireError as exc:
                waiting = (isinstance(exc, BrokerError) and exc.code in _COORDINATOR_ERRORS
                           and time.monotonic() + pause_s < coordinator_deadline)
                if not _retriable(exc) or (attempt + 1 >= attempts and not waiting):
                    if attempt:
                        _log.warning("%s failed after %d attempts: %s", what, attempt + 1, exc)
                    raise
                attempt += 1
                _log.debug("%s failed (%s); retrying", what, exc)
                time.sleep(min(pause_s * attempt, 1.0))
                self._coordinators.clear()
                try:
                    self.client.refresh_metadata()
                except KwireError:
                    pass

    # --- partitions ---------------------------------------------------------------------------
    def partitions(self) -> list[TP]:
        """The partitions the options select, sorted; a named topic or partition that does not
        exist is an error."""
        return self._retrying("listing partitions", self._partitions)

    def _partitions(self) -> list[TP]:
        o = self.options
        client = self.client
        if o.subscribe_pattern is not None:
            md = client.refresh_metadata(None)
            rx = re.compile(o.subscribe_pattern)
            out: list[TP] = []
            for name, tinfo in md.topics.items():
                if tinfo.is_internal or name in _INTERNAL_TOPICS or not rx.fullmatch(name):
                    continue
                out.extend((name, p) for p in tinfo.partitions)
            if not out:
                _log.warning("subscribePattern=%s matches no topic", o.subscribe_pattern)
            return sorted(out)
        topics = list(o.subscribe) if o.subscribe else sorted({t for t, _ in o.assign})
        client.metadata.add_topics(topics)
        md = client.refresh_metadata(topics)
        found: dict[str, list[int]] = {}
        for t in topics:
            info = md.topic(t)
            if info is None or info.error_code == _UNKNOWN_TOPIC_OR_PARTITION or (
                    info.error_code == 0 and not info.partitions):
                raise for_code(_UNKNOWN_TOPIC_OR_PARTITION,
                               f"topic {t!r} does not exist ({o.describe_subscription()}, "
                               f"kafka.bootstrap.servers={o.bootstrap_servers})")
            if info.error_code:
                raise for_code(info.error_code, f"metadata of topic {t!r}")
            found[t] = sorted(info.partitions)
        if o.subscribe:
            return sorted((t, p) for t in topics for p in found[t])
        missing = [(t, p) for t, p in o.assign if p not in found[t]]
        if missing:
            names = ", ".join(f"{t}-{p} (topic has {len(found[t])} partitions)" for t, p in missing)
            raise for_code(_UNKNOWN_TOPIC_OR_PARTITION, f"assign names partitions that do not exist: {names}")
        return sorted(o.assign)

    def topic_id(self, topic: str) -> uuid.UUID:
        tid = self.client.metadata.topic_id(topic)
        return tid if tid is not None else ZERO_UUID

    def _learn_topic_ids(self, topics: Iterable[str]) -> None:
        """Refresh metadata for topics whose id is unknown: OffsetCommit v10+ and OffsetFetch
        v10+ name topics by id alone, and Kafka 4 answers a zero id with UNKNOWN_TOPIC_ID."""
        missing = [t for t in topics if self.client.metadata.topic_id(t) is None]
        if missing:
            self.client.refresh_metadata(missing)

    def topic_ids(self, tps: Iterable[TP]) -> dict[str, uuid.UUID]:
        """``{topic: id}`` for the topics of ``tps`` whose id the metadata (v10+) knows, as of the
        last refresh (:meth:`partitions` refreshes)."""
        md = self.client.metadata
        ids = {t: md.topic_id(t) for t in sorted({t for t, _ in tps})}
        return {t: i for t, i in ids.items() if i is not None}

    # --- ListOffsets --------------------------------------------------------------------------
    def list_offsets(self, queries: Mapping[TP, int]) -> dict[TP, int | None]:
        """``{tp: timestamp}`` -> ``{tp: offset}`` (None: no record at or after the timestamp).

        Timestamp -2 asks for the earliest offset, -1 for the latest (the last stable offset
        under read_committed).
        """
        if not queries:
            return {}
        return self._retrying("looking up offsets", lambda: self._list_offsets(queries))

    def _list_offsets(self, queries: Mapping[TP, int]) -> dict[TP, int | None]:
        """Admin.list_offsets (the leader epochs sent, moved leaders asked again); a timestamp
        with no record at or after it is None (Kafka answers offset -1; some brokers answer an
        offset with timestamp -1)."""
        found = self.admin.list_offsets(
            queries, self._config.request_timeout_ms / 1000,
            isolation_level="read_committed" if self.options.isolation_level else "read_uncommitted")
        out: dict[TP, int | None] = {}
        for tp, ts in queries.items():
            listed = found[tp]
            assert not isinstance(listed, BaseException)  # (raise_on_error raised it)
            out[tp] = None if ts >= 0 and (listed.offset < 0 or listed.timestamp < 0) else listed.offset
        return out

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self.list_offsets({tp: -2 for tp in tps})  # type: ignore[return-value]

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The end of each log (the last stable offset under read_committed).

        ListOffsets(-1) answers it; a Fetch at that offset confirms it with the partition's
        high watermark / last stable offset, and the larger wins.  (Tansu answers ListOffsets
        -1 with the last batch's base offset + 1, short of the end when batches hold several
        records.)
        """
        listed: dict[TP, int] = self.list_offsets({tp: -1 for tp in tps})  # type: ignore[assignment]
        if not listed:
            return {}
        marks = self._retrying("confirming the latest offsets", lambda: self._watermarks(listed))
        return {tp: max(o, marks.get(tp, o)) for tp, o in listed.items()}

    def _watermarks(self, at: Mapping[TP, int]) -> dict[TP, int]:
        """Per partition, the end the broker reports to a Fetch at ``at[tp]`` (reading nothing;
        Admin's log-bounds confirmation)."""
        marks = self.admin.fetch_watermarks(
            at, self._config.request_timeout_ms / 1000,
            isolation_level="read_committed" if self.options.isolation_level else "read_uncommitted")
        return {tp: end for tp, (end, _start) in marks.items()}

    # --- groups -------------------------------------------------------------------------------
    def coordinator(self, group: str) -> int:
        node = self._coordinators.get(group)
        if node is None:
            node = self._coordinators[group] = self.admin.find_coordinator(
                group, timeout=self._config.request_timeout_ms / 1000).id
        return node

    def committed(self, group: str, tps: Iterable[TP]) -> dict[TP, int | None]:
        """The group's committed offsets (None where it has none)."""
        return self.committed_with_ids(group, tps)[0]

    def committed_with_ids(self, group: str, tps: Iterable[TP]) -> tuple[dict[TP, int | None], dict[str, uuid.UUID]]:
        """The group's committed offsets, and ``{topic: id}`` for the topics whose offsets kwire
        committed with the topic's id in the commit metadata (``kwire.topicId=<uuid>``): a
        different id now means the offsets belong to a deleted topic of the same name."""
        tps = sorted(tps)
        if not tps:
            return {}, {}
        return self._retrying(f"fetching the committed offsets of group {group!r}",
                              lambda: self._committed(group, tps))

    def _committed(self, group: str, tps: list[TP]) -> tuple[dict[TP, int | None], dict[str, uuid.UUID]]:
        self._learn_topic_ids({t for t, _ in tps})  # (topic_ids() answers from them next)
        got = self.admin.list_consumer_group_offsets(
            group, tps, timeout=self._config.request_timeout_ms / 1000, require_stable=True)
        out: dict[TP, int | None] = {tp: None for tp in tps}
        ids: dict[str, uuid.UUID] = {}
        for tp, om in got.items():
            if tp in out and om.offset >= 0:
                out[tp] = om.offset
                tid = _committed_topic_id(om.metadata)
                if tid is not None:
                    ids[tp[0]] = tid
        return out, ids

    def commit(self, group: str, offsets: Mapping[TP, int], metadata: str | None = None) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) to ``group``.  Without
        ``metadata``, each partition's metadata records its topic's id (``kwire.topicId=<uuid>``)
        where known, so that a later ``startingOffsets=group`` can tell a recreated topic."""
        if not offsets:
            return
        self._retrying(f"committing offsets to group {group!r}", lambda: self._commit(group, offsets, metadata))

    def _commit(self, group: str, offsets: Mapping[TP, int], metadata: str | None) -> None:
        md = self.client.metadata
        self._learn_topic_ids({t for t, _ in offsets})
        oms = {}
        for (t, p), o in sorted(offsets.items()):
            part = md.partition(t, p)
            meta = metadata
            if meta is None:
                tid = md.topic_id(t)
                meta = None if tid is None else f"{_TOPIC_ID_METADATA}{tid}"
            oms[(t, p)] = OffsetAndMetadata(int(o), part.leader_epoch if part is not None else None, meta)
        res = self.admin.alter_consumer_group_offsets(
            group, oms, timeout=self._config.request_timeout_ms / 1000, raise_on_error=False)
        failed = []
        retriable = []
        for (name, p), err in sorted(res.items()):
            if err is None:
                continue
            if err.retriable or err.code in _COORDINATOR_ERRORS:
                retriable.append(err)
            failed.append(f"{name}-{p}: {err}")
        if failed and len(retriable) == len(failed):  # e.g. a loading coordinator: every partition says so
            raise retriable[0]
        if failed:
            raise CommitFailedError(
                f"committing to group {group!r} failed: {'; '.join(failed)}.  commitToGroup commits "
                "as a client outside the group, which the broker refuses while the group has "
                "active members (UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION); use a group of its own.")

    # --- planning -----------------------------------------------------------------------------
    def resolve_start(self, tps: list[TP], earliest: dict[TP, int], latest: dict[TP, int]
                      ) -> tuple[dict[TP, int], dict[str, uuid.UUID]]:
        """The starting offsets, and the ids of the topics they were taken in where that is not
        now (``startingOffsets=group``: the ids kwire committed with the offsets)."""
        o = self.options
        spec = o.starting
        committed: dict[TP, int | None] | None = None
        start_ids: dict[str, uuid.UUID] = {}
        if spec.kind == "group":
            assert o.group_id is not None  # (SourceOptions: startingOffsets=group needs a group)
            committed, start_ids = self.committed_with_ids(o.group_id, tps)
        found = self.list_offsets(planner.timestamp_queries(spec, tps))
        start = planner.resolve(spec, tps, earliest=earliest, latest=latest, committed=committed,
                                found=found, auto_offset_reset=o.auto_offset_reset,
                                timestamp_strategy=o.starting_timestamp_strategy)
        return start, start_ids

    def plan_batch(self, executors: tuple[str, ...] = ()) -> tuple[planner.Plan, dict[TP, int]]:
        """The ranges of a batch query, and the latest offsets they were planned against."""
        o = self.options
        tps = self.partitions()
        planner.check_named_partitions(o.starting, tps, _spec_option(o, starting=True))
        planner.check_named_partitions(o.ending, tps, _spec_option(o, starting=False))
        earliest = self.earliest(tps)
        latest = self.latest(tps)
        start, start_ids = self.resolve_start(tps, earliest, latest)
        found_end = self.list_offsets(planner.timestamp_queries(o.ending, tps))
        end = planner.resolve(o.ending, tps, earliest=earliest, latest=latest, found=found_end, ending=True)
        plan = planner.plan_ranges(start, end, earliest=earliest, latest=latest,
                                   fail_on_data_loss=o.fail_on_data_loss,
                                   min_partitions=o.min_partitions,
                                   max_records_per_partition=o.max_records_per_partition,
                                   executors=executors, start_ids=start_ids, topic_ids=self.topic_ids(tps))
        for w in plan.warnings:
            _log.warning("%s", w)
        log_plan(plan, latest)
        return plan, latest


_TOPIC_ID_METADATA = "kwire.topicId="


def _committed_topic_id(metadata: str | None) -> uuid.UUID | None:
    """The topic id in commit metadata written by :meth:`OffsetReader.commit` (or None)."""
    if metadata and metadata.startswith(_TOPIC_ID_METADATA):
        try:
            return uuid.UUID(metadata[len(_TOPIC_ID_METADATA):])
        except ValueError:
            return None
    return None


def lookup_topic_ids(config: Mapping[str, Any], topics: Iterable[str]) -> dict[str, uuid.UUID]:
    """``{topic: id}`` for ``topics`` (those whose id the cluster reports), from one Metadata
    request with the kwire configuration ``config`` (``kafka_rdd``'s ranges pin the topics
    they were defined on)."""
    from ..config import parse_config

    topics = sorted(set(topics))
    if not topics:
        return {}
    client = NetworkClient(parse_config(dict(config), role="consumer"))
    try:
        client.metadata.add_topics(topics)
        client.refresh_metadata(topics)
        ids = {t: client.metadata.topic_id(t) for t in topics}
    finally:
        client.close()
    return {t: i for t, i in ids.items() if i is not None}


def _spec_option(o: SourceOptions, *, starting: bool) -> str:
    names = (("startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp") if starting
             else ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"))
    for n in names:
        if n in o.given:
            return n
    return names[0]


def log_plan(plan: planner.Plan, latest: Mapping[TP, int]) -> None:
    """One INFO line per partition: what is read, and the lag left behind it."""
    if not _log.isEnabledFor(logging.INFO):
        return
    behind = planner.lag(plan.end, latest)
    for tp in sorted(plan.end):
        _log.info("%s-%s reads [%d, %d), %d records; lag after it: %d",
                  tp[0], tp[1], plan.start[tp], plan.end[tp], plan.end[tp] - plan.start[tp],
                  behind.get(tp, 0))
