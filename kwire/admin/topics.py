"""Admin calls on topics, partitions, records, configs and the cluster."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import BrokerError, KafkaTimeoutError, for_code
from ..net import ClusterSnapshot, Metadata
from ..protocol.schema import ZERO_UUID
from ._base import AdminBase, _err, _error, _ms, _results
from .types import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    BrokerNode,
    ClusterDescription,
    ConfigEntry,
    ConfigSynonym,
    NewTopic,
    PartitionDescription,
    TopicDescription,
)

_TOPIC_ALREADY_EXISTS = 36


class TopicCalls(AdminBase):
    def create_topics(self, topics: Iterable[NewTopic | tuple[Any, ...] | str], timeout: float | None = 30.0, *,
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
            results[r["name"]] = _error(code, r.get("error_message"), topic=r["name"])
        _results(results, raise_on_error)
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
        by_leader: dict[int, dict[str, list[dict[str, Any]]]] = {}
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
            resp = self._answer(f)
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
        out: dict[Any, Any] = {}
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

    def incremental_alter_configs(self, changes: Mapping[tuple[int, str], Iterable[tuple[Any, ...]]],
                                  timeout: float | None = 30.0, *, validate_only: bool = False,
                                  raise_on_error: bool = True
                                  ) -> dict[tuple[int, str], BrokerError | None]:
        """Change properties of resources (IncrementalAlterConfigs): ``{(resource_type, name):
        [(property, op, value), ...]}`` with op OP_SET, OP_DELETE, OP_APPEND or OP_SUBTRACT;
        properties not named keep their values."""
        changes = {(int(t), str(n)): list(ops) for (t, n), ops in changes.items()}
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        out: dict[tuple[int, str], BrokerError | None] = {k: None for k in changes}
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
        out: dict[tuple[int, str], BrokerError | None] = {k: None for k in configs}
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

    def _by_resource_node(self, resources: Iterable[tuple[int, str]], timeout_ms: int
                          ) -> dict[int | None, list[tuple[int, str]]]:
        """Broker resources go to that broker (its own configs), the others to any broker."""
        out: dict[Any, Any] = {}
        for t, n in resources:
            node = None
            if t in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and n:
                node = int(n)
                self._know_broker(node, timeout_ms)
            out.setdefault(node, []).append((t, n))
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

        def body(v: int) -> dict[str, Any]:
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


def _new_topic(t: NewTopic | tuple[Any, ...] | str) -> NewTopic:
    if isinstance(t, NewTopic):
        return t
    if isinstance(t, str):
        return NewTopic(t)
    return NewTopic(*t)
