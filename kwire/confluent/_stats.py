"""``stats_cb`` / ``statistics.interval.ms``: a JSON document every interval, served from poll()
(consumer: also consume(); producer: also flush()), with the fields of librdkafka's statistics
people graph most, under librdkafka's names:

* top level: ``name``, ``client_id``, ``type``, ``ts`` (µs, monotonic), ``time`` (s, wall clock),
  ``age`` (µs since the client started), ``msg_cnt`` (producer: messages not yet delivered);
* ``topics.<t>.partitions.<p>``: ``partition``, ``hi_offset`` and ``ls_offset`` (high watermark
  and last stable offset of the last fetch), ``lo_offset`` (log start), ``app_offset`` (next
  offset the application gets), ``committed_offset``, ``consumer_lag``
  (``hi_offset - app_offset``, -1 when unknown), ``fetch_state``;
* ``cgrp`` (consumer): ``state``, ``rebalance_cnt``, ``assignment_size``.

Everything else librdkafka reports (per-broker round-trip histograms, queue internals) has no
counterpart in kwire and is absent.
"""
from __future__ import annotations

import json
import time


class Stats:
    __slots__ = ("cb", "interval_s", "client", "role", "next_s", "start_s", "rebalances",
                 "_last_assign")

    @classmethod
    def maybe(cls, extra: dict, client, role: str) -> "Stats | None":
        cb = extra.get("stats_cb")
        ms = extra.get("statistics.interval.ms", 0)
        if cb is None or not ms:
            return None
        return cls(cb, ms, client, role)

    def __init__(self, cb, interval_ms: int, client, role: str):
        self.cb = cb
        self.interval_s = interval_ms / 1000
        self.client = client
        self.role = role
        self.start_s = time.monotonic()
        self.next_s = self.start_s + self.interval_s
        self.rebalances = 0
        self._last_assign = None

    def maybe_emit(self, now_s: float) -> None:
        if now_s < self.next_s:
            return
        self.next_s = now_s + self.interval_s
        self.cb(json.dumps(self.document(now_s)))

    def _brokers(self) -> dict:
        """``brokers.<name>``: ``name``, ``nodeid``, ``state`` (kwire's connection state, upper
        case as librdkafka's: UP, DOWN, CONNECT, ...) -- none when no brokers were configured."""
        if self.client._no_brokers:
            return {}
        net = self.client._p._net if self.role == "producer" else self.client._c._net
        out = {}
        for node_id, conn in list(net._conns.items()):
            name = f"{conn.host}:{conn.port}/{node_id if node_id >= 0 else 'bootstrap'}"
            state = conn.state.name
            out[name] = {"name": name, "nodeid": node_id,
                         "state": {"READY": "UP", "DISCONNECTED": "DOWN"}.get(state, state)}
        return out

    def document(self, now_s: float) -> dict:
        doc = {"name": f"kwire#{self.role}", "type": self.role, "ts": int(now_s * 1e6),
               "time": int(time.time()), "age": int((now_s - self.start_s) * 1e6)}
        doc["brokers"] = self._brokers()
        if self.role == "producer":
            p = self.client._p
            doc["client_id"] = p.config.client_id
            doc["msg_cnt"] = len(p)
            doc["topics"] = {}
            return doc
        c = self.client._c
        doc["client_id"] = c.config.client_id
        topics: dict = {}
        app_pos = dict(c._pos)
        try:
            items = list(c._subs.items())  # the driver thread owns it: a snapshot
        except RuntimeError:
            items = []
        for tp, st in items:
            t, p = tp
            pos = app_pos.get(tp)
            app = pos[0] if pos else -1001
            hi = st.high_watermark if st.high_watermark is not None else -1
            part = {"partition": p, "hi_offset": hi,
                    "ls_offset": st.last_stable_offset, "lo_offset": st.log_start_offset,
                    "app_offset": app,
                    "committed_offset": st.committed,
                    "consumer_lag": hi - app if hi >= 0 and app >= 0 else -1,
                    "fetch_state": st.state.name.lower()}
            if part["committed_offset"] is None:
                part["committed_offset"] = -1001
            topics.setdefault(t, {"topic": t, "partitions": {}})["partitions"][str(p)] = part
        doc["topics"] = topics
        assigned = frozenset(c._assigned)
        if assigned != self._last_assign:
            if self._last_assign is not None:
                self.rebalances += 1
            self._last_assign = assigned
        state = getattr(c._coord, "state", None)
        doc["cgrp"] = {"state": str(state).split(".")[-1].lower() if state is not None else "",
                       "rebalance_cnt": self.rebalances, "assignment_size": len(assigned)}
        return doc
