"""Admin calls on partitions' offsets: ListOffsets to each leader, and the log bounds it
answers confirmed by a Fetch that reads nothing."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from ..errors import BrokerError, KwireError
from ..protocol.schema import ZERO_UUID
from ._base import AdminBase, _err, _error, _ms, _results
from .types import EARLIEST, LATEST, MAX_TIMESTAMP, ListedOffset, LogBounds

if TYPE_CHECKING:  # (types only: importing kwire.protocol.bodies takes ~0.1 s)
    from ..protocol.bodies import ListOffsetsResponse


class OffsetCalls(AdminBase):
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
            by_leader: dict[int, dict[str, list[dict[str, Any]]]] = {}
            again: dict[tuple[str, int], int] = {}
            for (t, p), spec in todo.items():
                part = md.partition(t, p)
                info = md.topic(t)
                if part is None or part.leader < 0:
                    code = 5 if part is not None else info.error_code if info is not None and \
                        info.error_code else 3
                    out[(t, p)] = _error(code, f"{t}[{p}] has no known leader", topic=t,
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
                resp = cast("ListOffsetsResponse", self._answer(f))
                for tr in resp["topics"]:
                    for pr in tr["partitions"]:
                        key = (tr["name"], pr["partition_index"])
                        if key not in todo:
                            continue
                        err = _err(pr["error_code"], f"{key[0]}[{key[1]}]", topic=key[0])
                        if err is not None and err.retriable:
                            again[key] = todo[key]
                        ep = pr.get("leader_epoch", -1)
                        out[key] = err if err is not None else ListedOffset(
                            pr["offset"], pr["timestamp"], ep if ep >= 0 else None)
            wait_s = self.config.retry_backoff_ms / 1000
            if not again or time.monotonic() + wait_s >= deadline:
                break
            time.sleep(wait_s)
            todo = again
        for k in specs:
            if k not in out:
                out[k] = _error(3, f"ListOffsets answered without {k[0]}[{k[1]}]", topic=k[0])
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
        md = self._net.refresh_metadata(sorted({t for t, _ in at}), timeout_ms)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for (t, p) in sorted(at):
            part = md.partition(t, p)
            if part is not None and part.leader >= 0:
                self._know_broker(part.leader, timeout_ms)
                by_leader.setdefault(part.leader, {}).setdefault(t, []).append(p)
        pending = []
        for leader, topics in by_leader.items():
            ids = {t: md.topic_id(t) or ZERO_UUID for t in topics}
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
                resp = self._answer(f)
            except KwireError:
                continue  # ListOffsets' answers stand
            names = {tid: t for t, tid in ids.items()}
            for t in resp["responses"]:
                name = t.get("topic") or names.get(t.get("topic_id"))
                if name is None:
                    continue
                for p in t["partitions"]:
                    if p["error_code"]:
                        continue
                    end = p["high_watermark"]
                    if read_committed and p.get("last_stable_offset", -1) >= 0:
                        end = p["last_stable_offset"]
                    out[(name, p["partition_index"])] = (end, p.get("log_start_offset", -1))
        return out
