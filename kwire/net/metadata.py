"""The cluster metadata cache: brokers, controller, topics, partitions and their leaders.

No I/O: :class:`Metadata` is fed decoded Metadata responses (:meth:`Metadata.update`) and tells
its owner when it wants a refresh (:meth:`Metadata.needs_update`).  The
:class:`~kwire.net.client.NetworkClient` sends the requests and learns broker addresses from it.

What a Metadata request asks for is :attr:`Metadata.wanted_topics`: ``None`` for every topic,
otherwise the topics some user of the client registered with :meth:`Metadata.add_topics`.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any

from ..protocol.schema import ZERO_UUID


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1 when there is none right now
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID = ZERO_UUID
    is_internal: bool = False
    error_code: int = 0
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterSnapshot:
    """An immutable view of the cache at one moment (what Admin.list_topics returns)."""

    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]
    updated_ms: int


class Metadata:
    """The cached cluster metadata, refreshed when stale or on request."""

    def __init__(self, max_age_ms: int = 900_000, *, refresh_backoff_ms: int = 100):
        self.max_age_ms = max_age_ms
        self.refresh_backoff_ms = refresh_backoff_ms
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id: int = -1
        self.cluster_id: str | None = None
        self.topics: dict[str, TopicInfo] = {}
        self.topic_names: dict[uuid.UUID, str] = {}  # topic id -> name
        self.updated_ms: int = -1  # -1: never
        self.version: int = 0  # +1 per update, so users can notice changes cheaply
        self.wanted_topics: set[str] | None = set()  # None = all topics
        self._update_requested = True
        self._last_attempt_ms: int = -(10**12)

    # --- what to ask for ------------------------------------------------------------------
    def add_topics(self, topics: Iterable[str]) -> None:
        """Track ``topics`` (requesting an update if any is new)."""
        if self.wanted_topics is None:
            return
        new = set(topics) - self.wanted_topics
        if new:
            self.wanted_topics |= new
            self._update_requested = True

    def want_all_topics(self) -> None:
        if self.wanted_topics is not None:
            self.wanted_topics = None
            self._update_requested = True

    def request_update(self) -> None:
        """Ask for a refresh at the next opportunity (e.g. after NOT_LEADER_OR_FOLLOWER)."""
        self._update_requested = True

    @property
    def update_requested(self) -> bool:
        return self._update_requested

    def is_stale(self, now_ms: int) -> bool:
        return self.updated_ms < 0 or now_ms - self.updated_ms >= self.max_age_ms

    def needs_update(self, now_ms: int) -> bool:
        """Should the owner send a Metadata request now?  (Honours the refresh backoff.)"""
        if now_ms - self._last_attempt_ms < self.refresh_backoff_ms:
            return False
        return self._update_requested or self.is_stale(now_ms)

    def ms_until_update(self, now_ms: int) -> int:
        """How long the owner may sleep before a refresh is due."""
        backoff = max(0, self._last_attempt_ms + self.refresh_backoff_ms - now_ms)
        if self._update_requested or self.updated_ms < 0:
            return backoff
        return max(backoff, self.updated_ms + self.max_age_ms - now_ms)

    def attempt(self, now_ms: int) -> None:
        """The owner sent a Metadata request now."""
        self._last_attempt_ms = now_ms

    def failed(self, now_ms: int) -> None:
        """The request failed; try again after the backoff."""
        self._last_attempt_ms = now_ms
        self._update_requested = True

    def request_body(self, version: int, topics: Iterable[str] | None | EllipsisType = ..., *,
                     allow_auto_topic_creation: bool = False) -> dict[str, Any]:
        """A Metadata request body for ``version``; ``topics=None`` asks for all topics."""
        if topics is ...:
            topics = self.wanted_topics
        wanted: list[dict[str, Any]] | None
        if topics is None:
            # v0 has no null array: an empty list meant "all topics" there.
            wanted = [] if version == 0 else None
        else:
            wanted = [{"name": t, "topic_id": ZERO_UUID} for t in sorted(topics)]
        return {"topics": wanted, "allow_auto_topic_creation": allow_auto_topic_creation,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}

    # --- learning -------------------------------------------------------------------------
    def update(self, response: dict[str, Any], now_ms: int | None = None, *, all_topics: bool | None = None) -> None:
        """Merge a decoded Metadata response.

        ``all_topics`` says whether the request asked for every topic; then topics missing
        from the answer are forgotten.  Otherwise only the topics in the answer are replaced.
        ``now_ms`` is the monotonic clock in ms (default: now).
        """
        if now_ms is None:
            now_ms = time.monotonic_ns() // 1_000_000
        brokers = {}
        for b in response.get("brokers", ()):
            brokers[b["node_id"]] = BrokerInfo(b["node_id"], b["host"], b["port"], b.get("rack"))
        if brokers:
            self.brokers = brokers
        self.controller_id = response.get("controller_id", -1)
        if response.get("cluster_id") is not None:
            self.cluster_id = response["cluster_id"]
        fresh: dict[str, TopicInfo] = {}
        for t in response.get("topics", ()):
            name = t.get("name")
            topic_id = t.get("topic_id") or ZERO_UUID
            if name is None:
                name = self.topic_names.get(topic_id)
                if name is None:
                    continue
            parts = {}
            for p in t.get("partitions", ()):
                idx = p["partition_index"]
                parts[idx] = PartitionInfo(
                    topic=name, partition=idx, leader=p.get("leader_id", -1),
                    leader_epoch=p.get("leader_epoch", -1),
                    replicas=tuple(p.get("replica_nodes", ())), isr=tuple(p.get("isr_nodes", ())),
                    offline_replicas=tuple(p.get("offline_replicas", ())),
                    error_code=p.get("error_code", 0))
            fresh[name] = TopicInfo(name=name, topic_id=topic_id, is_internal=t.get("is_internal", False),
                                    error_code=t.get("error_code", 0), partitions=parts)
        if all_topics is None:
            all_topics = self.wanted_topics is None
        if all_topics:
            self.topics = fresh
        else:
            self.topics.update(fresh)
        self.topic_names = {t.topic_id: n for n, t in self.topics.items() if t.topic_id != ZERO_UUID}
        self.updated_ms = now_ms
        self._last_attempt_ms = now_ms
        self._update_requested = False
        self.version += 1

    # --- questions ------------------------------------------------------------------------
    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def partitions_for(self, topic: str) -> list[int] | None:
        """Sorted partition ids, or None when the topic is unknown (or in error)."""
        t = self.topics.get(topic)
        if t is None or (t.error_code and not t.partitions):
            return None
        return sorted(t.partitions)

    def leader_for(self, topic: str, partition: int) -> int | None:
        t = self.topics.get(topic)
        if t is None:
            return None
        p = t.partitions.get(partition)
        if p is None or p.leader < 0:
            return None
        return p.leader

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.topic_names.get(topic_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        t = self.topics.get(name)
        return None if t is None or t.topic_id == ZERO_UUID else t.topic_id

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(self.cluster_id, self.controller_id, dict(self.brokers),
                               dict(self.topics), self.updated_ms)
