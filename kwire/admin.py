"""Cluster administration: create topics, describe the cluster, delete records.

    with Admin({"bootstrap.servers": "localhost:9092"}) as admin:
        admin.create_topics([("events", 6, 1)], ignore_existing=True)
        snapshot = admin.list_topics()
        snapshot.topics["events"].partitions[0].leader

Timeouts are in seconds, as in confluent-kafka.  Broker errors surface as the typed
:class:`~kwire.errors.BrokerError` subclasses (``TopicAlreadyExistsError``, ...).
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import Config, parse_config
from .errors import BrokerError, KafkaTimeoutError, TopicAlreadyExistsError, for_code  # noqa: F401
from .net import ClusterSnapshot, Metadata, NetworkClient

__all__ = ["Admin", "NewTopic", "ClusterSnapshot"]

_TOPIC_ALREADY_EXISTS = 36


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

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *, tracer=None):
        self.config = config if isinstance(config, Config) else parse_config(config or {}, role="admin")
        self._net = NetworkClient(self.config, tracer=tracer, auto_metadata=False)

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
