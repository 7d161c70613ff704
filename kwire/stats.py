"""Client statistics: ``stats_cb`` + ``statistics.interval.ms``, librdkafka's JSON document.

Every ``statistics.interval.ms`` the client calls ``stats_cb(json_str)`` on the application's
thread, from ``poll()`` (consumer: also ``consume()``; producer: also ``flush()``), as librdkafka
does.  The document follows librdkafka's STATISTICS.md, field names included, for the fields
people graph:

* top level: ``name type client_id ts time age replyq msg_cnt msg_size msg_max msg_size_max
  simple_cnt metadata_cache_cnt tx tx_bytes rx rx_bytes txmsgs txmsg_bytes rxmsgs rxmsg_bytes``;
* ``brokers.<host:port/id>``: ``name nodeid nodename source state tx txbytes rx rxbytes
  req_timeouts outbuf_cnt waitresp_cnt req`` (requests sent, by API name) and ``rtt`` (window
  statistics of the round-trip times of the responses received since the last document, µs);
* ``topics.<t>``: ``topic metadata_age partitions``; ``topics.<t>.partitions.<p>``: ``partition
  broker leader desired unknown`` and
  - consumer: ``fetchq_cnt fetchq_size fetch_state next_offset app_offset stored_offset
    committed_offset commited_offset (sic, librdkafka's old name) eof_offset lo_offset hi_offset
    ls_offset consumer_lag consumer_lag_stored rxmsgs rxbytes msgs``;
  - producer: ``msgq_cnt msgq_bytes msgs_inflight txmsgs txbytes msgs``;
* ``cgrp`` (consumer with group.id): ``state stateage join_state rebalance_age rebalance_cnt
  rebalance_reason assignment_size``.

Semantics as librdkafka's: offsets are -1001 when unknown; ``consumer_lag`` is the end offset
(``ls_offset`` with read_committed, ``hi_offset`` otherwise) minus ``committed_offset``,
``consumer_lag_stored`` the end minus ``stored_offset`` (-1 when either is unknown);
``rxmsgs`` counts records fetched and decoded for the application (not control records nor
aborted ones), ``txmsgs`` records the brokers acknowledged (a retried batch counts once).
Byte counts of records (``rxmsg_bytes``, ``txmsg_bytes``, partition ``rxbytes``/``txbytes``)
are record-batch bytes as on the wire, framing included (STATISTICS.md's definition;
librdkafka itself reports key + value sizes).  librdkafka's internals without a counterpart in
kwire (``int_latency``, ``outbuf_latency``, ``throttle``, ``toppars``, ``wakeups``,
``zbuf_grow``, idempotence ``eos``, per-topic ``batchsize``/``batchcnt``) are absent.

Cost: nothing when ``stats_cb`` or ``statistics.interval.ms`` is unset (the clients hold
``None`` and never call in here).  When set: a few counters per request sent/received and per
record batch, and the document itself once per interval.
"""
from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Sized
from typing import Any, Protocol, TypeVar

from .config import Config

__all__ = ["NetStats", "ConsumerStats", "ProducerStats", "window"]

OFFSET_INVALID = -1001
_RTT_SAMPLES_MAX = 10_000  # per broker and interval; min/max/avg/cnt stay exact beyond it
_names = itertools.count(1)
# Kafka's API names where librdkafka says them differently in ``req``
_REQ_NAMES = {"ApiVersions": "ApiVersion"}

# kwire's connection states as librdkafka's broker states
_BROKER_STATE = {"DISCONNECTED": "DOWN", "CONNECTING": "CONNECT", "TLS_HANDSHAKE": "SSL_HANDSHAKE",
                 "NEGOTIATING": "APIVERSION_QUERY", "AUTHENTICATING": "AUTH_HANDSHAKE",
                 "READY": "UP", "REAUTHENTICATING": "AUTH_HANDSHAKE"}
# kwire's fetch states as librdkafka's
_FETCH_STATE = {"INITIALIZING": "offset-query", "AWAIT_RESET": "offset-wait",
                "AWAIT_VALIDATION": "validate-epoch-wait", "FETCHING": "active"}
# the group member's states as librdkafka's cgrp (state, join_state)
_CGRP_STATE = {"UNJOINED": ("init", "init"), "FIND_COORDINATOR": ("query-coord", "init"),
               "PREPARING": ("up", "wait-unassign-call"), "JOINING": ("up", "wait-join"),
               "SYNCING": ("up", "wait-sync"), "STABLE": ("up", "steady"),
               "LEAVING": ("up", "wait-unassign-to-complete"), "CLOSED": ("term", "init")}

TP = tuple[str, int]  # (topic, partition)
# A JSON object of the document (its values are numbers, strings, and objects in turn).
Doc = dict[str, Any]


# --- what is read of the clients --------------------------------------------------------------
# kwire.stats sits beside kwire.net and below the clients (tests/test_layers.py), so it names
# what it reads of them structurally; mypy checks the clients against these at the call sites.

class _Named(Protocol):
    """An enum member (a connection's, a partition's or a group member's state)."""
    @property
    def name(self) -> str: ...


class _Conn(Protocol):
    """A kwire.net Connection."""
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def state(self) -> _Named: ...
    @property
    def out(self) -> Sized: ...
    @property
    def in_flight(self) -> Sized: ...


class _Net(Protocol):
    """A kwire.net NetworkClient."""
    @property
    def _conns(self) -> Mapping[int, _Conn]: ...


class _PartitionInfo(Protocol):
    @property
    def leader(self) -> int: ...


class _Metadata(Protocol):
    """kwire.net's Metadata."""
    @property
    def topics(self) -> Sized: ...
    @property
    def updated_ms(self) -> int: ...
    def topic(self, name: str) -> object | None: ...
    def partition(self, topic: str, partition: int) -> _PartitionInfo | None: ...


class _Position(Protocol):
    @property
    def offset(self) -> int: ...


class _PartitionState(Protocol):
    """A partition's state in the consumer's SubscriptionState."""
    @property
    def state(self) -> _Named: ...
    @property
    def position(self) -> _Position | None: ...
    @property
    def paused(self) -> bool: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def committed(self) -> int | None: ...
    @property
    def fence(self) -> int: ...


class _Subscriptions(Protocol):
    """The consumer's SubscriptionState."""
    def get(self, tp: TP) -> _PartitionState | None: ...
    def items(self) -> Iterable[tuple[TP, _PartitionState]]: ...


class _ConsumerDriver(Protocol):
    """The consumer's driver (kwire.consumer.driver.Driver)."""
    @property
    def _md(self) -> _Metadata: ...
    @property
    def _net(self) -> _Net: ...
    @property
    def _subs(self) -> _Subscriptions: ...
    @property
    def _q(self) -> Collection[Any]: ...        # raw chunks and events for the application
    @property
    def _urgent(self) -> Collection[Any]: ...
    @property
    def _eof_at(self) -> Mapping[TP, tuple[int, int]] | None: ...
    @property
    def _coord(self) -> object: ...


class _ConsumerApp(Protocol):
    """The consumer's application-thread side (kwire.consumer.app.AppThread)."""
    @property
    def _pos(self) -> Mapping[Any, Any]: ...       # tp -> (next offset, ...)
    @property
    def _consumed(self) -> Mapping[Any, Any]: ...  # tp -> (offset, ...)
    @property
    def _cur_tp(self) -> Any: ...
    @property
    def _cur(self) -> Sized | None: ...
    @property
    def _idx(self) -> int: ...
    @property
    def _assigned(self) -> Sized: ...


class _Message(Protocol):
    """A record in the producer (kwire.producer.batch.DeliveryReport)."""
    @property
    def _size(self) -> int: ...


class _Batch(Protocol):
    """kwire.producer.batch.Batch."""
    @property
    def tp(self) -> TP: ...
    @property
    def msgs(self) -> Collection[_Message]: ...
    @property
    def payload(self) -> Sized | None: ...


class _Producer(Protocol):
    """kwire.producer.Producer."""
    @property
    def config(self) -> Config: ...
    @property
    def _md(self) -> _Metadata: ...
    @property
    def _net(self) -> _Net: ...
    @property
    def _batches(self) -> Mapping[TP, Iterable[_Batch]]: ...
    @property
    def _parked(self) -> Mapping[str, Iterable[_Message]]: ...
    @property
    def _reports(self) -> Collection[_Message]: ...
    def __len__(self) -> int: ...


def window(samples: list[int], count: int, total: int, lo: int, hi: int) -> dict[str, int]:
    """librdkafka's window statistics of one interval: ``min max avg sum cnt stddev hdrsize
    p50 p75 p90 p95 p99 p99_99 outofrange`` (all 0 without samples)."""
    out = {"min": 0, "max": 0, "avg": 0, "sum": 0, "stddev": 0, "p50": 0, "p75": 0, "p90": 0,
           "p95": 0, "p99": 0, "p99_99": 0, "outofrange": 0, "hdrsize": 0, "cnt": 0}
    if not count:
        return out
    avg = total / count
    s = sorted(samples)
    n = len(s)
    out.update(min=lo, max=hi, avg=int(avg), sum=total, cnt=count,
               stddev=int(math.sqrt(sum((x - avg) ** 2 for x in s) / n)))
    for key, q in (("p50", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99),
                   ("p99_99", 99.99)):
        out[key] = s[min(n - 1, max(0, math.ceil(q / 100 * n) - 1))]
    return out


class _Broker:
    __slots__ = ("tx", "txbytes", "rx", "rxbytes", "req", "rtts", "rtt_cnt", "rtt_sum",
                 "rtt_min", "rtt_max", "conn")

    def __init__(self, conn: _Conn) -> None:
        self.conn = conn  # the last Connection seen (its counters outlive it in _conns)
        self.tx = self.txbytes = self.rx = self.rxbytes = 0
        self.req: dict[str, int] = {}
        self._reset_window()

    def _reset_window(self) -> None:
        self.rtts: list[int] = []
        self.rtt_cnt = self.rtt_sum = self.rtt_max = 0
        self.rtt_min = 0


class NetStats:
    """Per-broker request counters, fed by :class:`~kwire.net.NetworkClient` (its ``stats``
    attribute) on the thread that drives it."""

    def __init__(self) -> None:
        self.brokers: dict[int, _Broker] = {}

    def on_io(self, direction: str, conn: _Conn, api: str, size: int | None,
              rtt_us: int | None) -> None:
        b = self.brokers.get(conn.node_id)
        if b is None:
            b = self.brokers[conn.node_id] = _Broker(conn)
        elif b.conn is not conn:
            b.conn = conn
        if direction == "send":
            b.tx += 1
            b.txbytes += size or 0
            b.req[api] = b.req.get(api, 0) + 1
            return
        b.rx += 1
        b.rxbytes += size or 0
        if rtt_us is not None:
            b.rtt_cnt += 1
            b.rtt_sum += rtt_us
            if b.rtt_cnt == 1 or rtt_us < b.rtt_min:
                b.rtt_min = rtt_us
            if rtt_us > b.rtt_max:
                b.rtt_max = rtt_us
            if len(b.rtts) < _RTT_SAMPLES_MAX:
                b.rtts.append(rtt_us)

    def document(self, net: _Net, now_ms: int) -> tuple[Doc, list[int]]:
        """``brokers`` and the totals ``[tx, tx_bytes, rx, rx_bytes]``; starts a new rtt
        window."""
        out: Doc = {}
        tot = [0, 0, 0, 0]
        conns = dict(net._conns)
        for node_id, b in self.brokers.items():  # connections closed since keep their counts
            conns.setdefault(node_id, b.conn)
        for node_id, conn in conns.items():
            b = self.brokers.get(node_id) or _Broker(conn)
            source = "learned"
            if node_id < 0:
                name, source = f"{conn.host}:{conn.port}/bootstrap", "configured"
            elif getattr(conn, "dedicated", False):  # the group coordinator's connection
                name, source = "GroupCoordinator", "logical"
            else:
                name = f"{conn.host}:{conn.port}/{node_id}"
            req = {_REQ_NAMES.get(k, k): v for k, v in sorted(b.req.items())}
            out[name] = {
                "name": name, "nodeid": node_id, "nodename": f"{conn.host}:{conn.port}",
                "source": source,
                "state": _BROKER_STATE.get(conn.state.name, conn.state.name)
                if net._conns.get(node_id) is conn else "DOWN",
                "outbuf_cnt": len(conn.out), "waitresp_cnt": len(conn.in_flight),
                "tx": b.tx, "txbytes": b.txbytes, "rx": b.rx, "rxbytes": b.rxbytes,
                "req": req,
                "rtt": window(b.rtts, b.rtt_cnt, b.rtt_sum, b.rtt_min, b.rtt_max),
            }
            tot[0] += b.tx
            tot[1] += b.txbytes
            tot[2] += b.rx
            tot[3] += b.rxbytes
            b._reset_window()
        return out, tot


class _Base:
    role = ""

    def __init__(self, cb: Callable[[str], object], interval_ms: int, client_id: str,
                 now_ms: int) -> None:
        self.cb = cb
        self.interval_ms = interval_ms
        self.client_id = client_id
        self.name = f"kwire#{self.role}-{next(_names)}"
        self.start_ms = now_ms
        self.next_ms = now_ms + interval_ms
        self.net = NetStats()

    @classmethod
    def maybe(cls: type[_S], config: Config, net: Any, now_ms: int) -> _S | None:
        """The statistics of a client with this configuration, hooked into ``net``; None (and
        no hook) unless both ``stats_cb`` and ``statistics.interval.ms`` are set.  ``net``: the
        client's NetworkClient (Any: this sets its ``stats``, typed as kwire.net sees it)."""
        cb = config.stats_cb
        ms = config.statistics_interval_ms
        if cb is None or not ms:
            return None
        st = cls(cb, ms, config.client_id, now_ms)
        net.stats = st.net
        return st

    def _top(self, now_ms: int) -> Doc:
        return {"name": self.name, "client_id": self.client_id, "type": self.role,
                "ts": int(time.monotonic() * 1e6), "time": int(time.time()),
                "age": (now_ms - self.start_ms) * 1000}

    def _finish(self, doc: Doc, net: _Net, md: _Metadata, now_ms: int) -> Doc:
        brokers, (tx, txb, rx, rxb) = self.net.document(net, now_ms)
        doc["metadata_cache_cnt"] = len(md.topics)
        doc["brokers"] = brokers
        doc.update(tx=tx, tx_bytes=txb, rx=rx, rx_bytes=rxb)
        return doc


_S = TypeVar("_S", bound=_Base)


def _known(offset: int | None) -> int:
    return offset if offset is not None and offset >= 0 else OFFSET_INVALID


def _partition_base(md: _Metadata, t: str, p: int) -> Doc:
    info = md.partition(t, p)
    leader = info.leader if info is not None else -1
    return {"partition": p, "broker": leader, "leader": leader, "desired": False,
            "unknown": info is None}


def _topic(md: _Metadata, t: str, now_ms: int) -> Doc:
    age = now_ms - md.updated_ms if md.updated_ms >= 0 and md.topic(t) is not None else 0
    return {"topic": t, "metadata_age": age, "partitions": {}}


class ConsumerStats(_Base):
    """The consumer's statistics.  The driver thread counts (:meth:`on_chunk`) and, once per
    interval, takes what it owns (:meth:`driver_report`); the application thread adds what it
    owns (positions, stored offsets) and calls ``stats_cb`` (:meth:`deliver`)."""

    role = "consumer"

    def __init__(self, cb: Callable[[str], object], interval_ms: int, client_id: str,
                 now_ms: int) -> None:
        super().__init__(cb, interval_ms, client_id, now_ms)
        self.rx: dict[TP, list[int]] = {}  # tp -> [records, bytes] decoded for the application
        self.pending = False             # a report waits for the application
        self.rebalance_cnt = 0           # (application thread)
        self.rebalance_ms = -1
        self.rebalance_reason = ""
        self._state: str | None = None
        self._state_ms = self.start_ms

    def due(self, now_ms: int) -> bool:
        return not self.pending and now_ms >= self.next_ms

    def on_chunk(self, chunk: Any) -> None:
        """A piece of records decoded for the application (application thread)."""
        c = self.rx.get(chunk.tp)
        if c is None:
            c = self.rx[chunk.tp] = [0, 0]
        c[0] += len(chunk.records)
        c[1] += chunk.nbytes

    def on_rebalance(self, reason: str, now_ms: int) -> None:
        """An assignment or revocation handed to the application (application thread)."""
        self.rebalance_cnt += 1
        self.rebalance_ms = now_ms
        self.rebalance_reason = reason

    def driver_report(self, c: _ConsumerDriver, now_ms: int) -> Doc:
        """Everything the driver thread owns, as a document to complete (driver thread)."""
        self.pending = True
        self.next_ms = now_ms + self.interval_ms
        md = c._md
        doc = self._top(now_ms)
        doc.update(replyq=len(c._q) + len(c._urgent), msg_cnt=0, msg_size=0, msg_max=0,
                   msg_size_max=0, simple_cnt=0)
        fetchq: dict[TP, list[int]] = {}
        subs = c._subs
        for chunk in list(c._q):
            if type(chunk).__name__ != "FetchedChunk":
                continue
            st = subs.get(chunk.tp)
            if st is None or chunk.fence != st.fence:
                continue  # fetched before a seek, pause or revocation: to be dropped
            q = fetchq.get(chunk.tp)
            if q is None:
                q = fetchq[chunk.tp] = [0, 0]
            q[0] += len(chunk.records) if chunk.records is not None else 0
            q[1] += chunk.nbytes
        topics: Doc = {}
        rc = getattr(c, "_isolation", None) == 1  # READ_COMMITTED
        eof = c._eof_at or {}
        for tp, st in list(c._subs.items()):
            t, p = tp
            part = _partition_base(md, t, p)
            fq: Sequence[int] = fetchq.get(tp, (0, 0))
            pos = st.position
            hi = _known(st.high_watermark)
            ls = _known(st.last_stable_offset)
            committed = st.committed if st.committed is not None else OFFSET_INVALID
            e = eof.get(tp)
            part.update(desired=True, fetchq_cnt=fq[0], fetchq_size=fq[1],
                        fetch_state=_FETCH_STATE.get(st.state.name, "none")
                        if not st.paused else "stopped",
                        next_offset=pos.offset if pos is not None else OFFSET_INVALID,
                        committed_offset=committed, commited_offset=committed,
                        eof_offset=e[0] if e else OFFSET_INVALID,
                        lo_offset=_known(st.log_start_offset),
                        hi_offset=hi, ls_offset=ls, _end=ls if rc else hi)
            topics.setdefault(t, _topic(md, t, now_ms))["partitions"][str(p)] = part
        doc["topics"] = topics
        doc["txmsgs"] = doc["txmsg_bytes"] = 0

        coord = c._coord
        if getattr(c, "_group_id", None) is not None:
            name = getattr(getattr(coord, "state", None), "name", "")
            if name != self._state:
                self._state, self._state_ms = name, now_ms
            state, join = _CGRP_STATE.get(name, (name.lower(), ""))
            doc["cgrp"] = {"state": state, "stateage": now_ms - self._state_ms, "join_state": join}
        return self._finish(doc, c._net, md, now_ms)

    def deliver(self, c: _ConsumerApp, doc: Doc) -> None:
        """Complete the driver's document with the application's positions and hand it to
        ``stats_cb`` (application thread)."""
        self.pending = False
        pos, stored = c._pos, c._consumed
        cur_tp, cur = c._cur_tp, c._cur
        for t in doc["topics"].values():
            for part in t["partitions"].values():
                tp = (t["topic"], part["partition"])
                a = pos.get(tp)
                s = stored.get(tp)
                app = a[0] if a else OFFSET_INVALID
                sto = s[0] if s else OFFSET_INVALID
                end = part.pop("_end")
                committed = part["committed_offset"]
                part["app_offset"] = app
                part["stored_offset"] = sto
                part["consumer_lag"] = end - committed if 0 <= committed <= end else -1
                part["consumer_lag_stored"] = end - sto if 0 <= sto <= end else -1
                if tp == cur_tp and cur is not None:
                    part["fetchq_cnt"] += len(cur) - c._idx
                rx: Sequence[int] = self.rx.get(tp, (0, 0))  # (counted in this thread)
                part.update(rxmsgs=rx[0], rxbytes=rx[1], msgs=rx[0])
        doc["rxmsgs"] = sum(v[0] for v in self.rx.values())
        doc["rxmsg_bytes"] = sum(v[1] for v in self.rx.values())
        if "cgrp" in doc:
            now = int(time.monotonic() * 1000)
            doc["cgrp"].update(
                rebalance_age=now - self.rebalance_ms if self.rebalance_ms >= 0 else 0,
                rebalance_cnt=self.rebalance_cnt, rebalance_reason=self.rebalance_reason,
                assignment_size=len(c._assigned))
        self.cb(json.dumps(doc))


class ProducerStats(_Base):
    """The producer's statistics (the producer is driven on the application's thread)."""

    role = "producer"

    def __init__(self, cb: Callable[[str], object], interval_ms: int, client_id: str,
                 now_ms: int) -> None:
        super().__init__(cb, interval_ms, client_id, now_ms)
        self.tx: dict[TP, list[int]] = {}    # tp -> [records, bytes] sent in Produce requests
        self.inflight: dict[int, _Batch] = {}   # id(batch) -> batch

    def on_send(self, batches: Iterable[_Batch]) -> None:
        for b in batches:
            self.inflight[id(b)] = b

    def on_acked(self, b: _Batch) -> None:
        """A batch the broker acknowledged (acks=0: wrote): its records count as transmitted
        once, however often it was sent."""
        c = self.tx.get(b.tp)
        if c is None:
            c = self.tx[b.tp] = [0, 0]
        payload = b.payload
        assert payload is not None  # (it was built to be sent)
        c[0] += len(b.msgs)
        c[1] += len(payload)

    def on_done(self, batches: Iterable[_Batch]) -> None:
        for b in batches:
            self.inflight.pop(id(b), None)

    def maybe_emit(self, p: _Producer, now_ms: int) -> None:
        if now_ms < self.next_ms:
            return
        self.next_ms = now_ms + self.interval_ms
        self.cb(json.dumps(self.document(p, now_ms)))

    def document(self, p: _Producer, now_ms: int) -> Doc:
        md = p._md
        queued: dict[TP, list[int]] = {}   # tp -> [records, bytes] waiting in batches
        for tp, q in p._batches.items():
            n = sum(len(b.msgs) for b in q)
            if n:
                queued[tp] = [n, sum(m._size for b in q for m in b.msgs)]
        flying: dict[TP, list[int]] = {}
        for b in self.inflight.values():
            f = flying.setdefault(b.tp, [0, 0])
            f[0] += len(b.msgs)
            f[1] += sum(m._size for m in b.msgs)
        parked = sum(m._size for q in p._parked.values() for m in q)
        size = parked + sum(v[1] for v in queued.values()) + sum(v[1] for v in flying.values()) \
            + sum(m._size for m in p._reports)
        doc = self._top(now_ms)
        cfg = p.config
        doc.update(replyq=len(p._reports), msg_cnt=len(p), msg_size=size,
                   msg_max=cfg.queue_buffering_max_messages,
                   msg_size_max=0, simple_cnt=0)
        topics: Doc = {}
        for tp in sorted(set(self.tx) | set(queued) | set(flying)):
            t, p_ = tp
            part = _partition_base(md, t, p_)
            tx: Sequence[int] = self.tx.get(tp, (0, 0))
            qd: Sequence[int] = queued.get(tp, (0, 0))
            fl: Sequence[int] = flying.get(tp, (0, 0))
            part.update(msgq_cnt=qd[0], msgq_bytes=qd[1], xmit_msgq_cnt=0, xmit_msgq_bytes=0,
                        msgs_inflight=fl[0], txmsgs=tx[0], txbytes=tx[1],
                        msgs=tx[0] + qd[0])
            topics.setdefault(t, _topic(md, t, now_ms))["partitions"][str(p_)] = part
        for t in p._parked:
            topics.setdefault(t, _topic(md, t, now_ms))
        doc["topics"] = topics
        doc["txmsgs"] = sum(v[0] for v in self.tx.values())
        doc["txmsg_bytes"] = sum(v[1] for v in self.tx.values())
        doc["rxmsgs"] = doc["rxmsg_bytes"] = 0
        return self._finish(doc, p._net, md, now_ms)
