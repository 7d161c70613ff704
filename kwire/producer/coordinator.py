"""The transaction coordinator's requests: FindCoordinator (key type 1), InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and TxnOffsetCommit to the group's coordinator.

The user's calls (init_transactions, commit, abort, send_offsets) wait for their answer while
driving the producer's I/O through ``pump(wait_ms)``, so produce responses keep arriving;
AddPartitionsToTxn goes out asynchronously from the producer's driver, before the first batch
of a partition in a transaction.  Retriable answers (CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, lost connections) are
asked again after ``retry.backoff.ms`` until the call's deadline; NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE look the coordinator up again first.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import (
    BrokerError,
    KafkaConnectionError,
    KafkaTimeoutError,
    KwireError,
    for_code,
)
from ..net import NetworkClient, now_ms
from ..net.connection import InFlight
from .transactions import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_MOVED_CODES,
    COORDINATOR_RETRY_CODES,
    FATAL_CODES,
    TransactionManager,
)

__all__ = ["TxnCoordinatorClient"]

_KEY_GROUP = 0
_KEY_TRANSACTION = 1


class _Retry(Exception):
    def __init__(self, err: KwireError, moved: bool):
        self.err, self.moved = err, moved


class TxnCoordinatorClient:
    """Talks to the transaction coordinator for one :class:`TransactionManager`."""

    def __init__(self, net: NetworkClient, tm: TransactionManager, *, retry_backoff_ms: int,
                 request_timeout_ms: int, pump: Callable[[int], None]):
        self._net = net
        self._tm = tm
        self._backoff_ms = max(1, retry_backoff_ms)
        self._request_timeout_ms = request_timeout_ms
        self._pump = pump
        self._node: int | None = None  # the transaction coordinator
        self._adding = False
        self._next_add_ms = 0
        self._pid_inflight = False
        self._next_pid_ms = 0

    # --- lookups -----------------------------------------------------------------------------
    def _find(self, key: str, key_type: int, deadline_ms: int) -> int:
        def once() -> int:
            resp = self._net.request(None, "FindCoordinator",
                                     {"key": key, "key_type": key_type, "coordinator_keys": [key]},
                                     self._left(deadline_ms))
            c = resp["coordinators"][0] if resp.get("coordinators") else resp
            if c["error_code"]:
                raise self._classify(c["error_code"], c.get("error_message"))
            node: int = int(c["node_id"])
            if self._net.metadata.broker(node) is None:
                self._net.refresh_metadata([], self._left(deadline_ms))
            return node
        found: int = self._retrying(once, deadline_ms, refind=None)
        return found

    def _coordinator(self, deadline_ms: int) -> int:
        if self._node is None:
            assert self._tm.transactional_id is not None
            self._node = self._find(self._tm.transactional_id, _KEY_TRANSACTION, deadline_ms)
        return self._node

    # --- the blocking calls -------------------------------------------------------------------
    def init_producer_id(self, deadline_ms: int) -> None:
        """InitProducerId (transactional: to the coordinator, which also fences older producers
        of the id and aborts their open transaction); sets the manager's identity."""
        tm = self._tm

        def once() -> None:
            node = self._coordinator(deadline_ms) if tm.transactional else None
            resp = self._net.request(node, "InitProducerId", self._init_body, self._left(deadline_ms))
            if resp["error_code"]:
                raise self._classify(resp["error_code"])
            tm.set_identity(resp["producer_id"], resp["producer_epoch"])
        self._retrying(once, deadline_ms, refind="txn")

    def add_offsets(self, group_id: str, deadline_ms: int) -> None:
        tm = self._tm

        def once() -> None:
            node = self._coordinator(deadline_ms)
            resp = self._net.request(node, "AddOffsetsToTxn", {
                "transactional_id": tm.transactional_id, "producer_id": tm.producer_id,
                "producer_epoch": tm.epoch, "group_id": group_id}, self._left(deadline_ms))
            if resp["error_code"]:
                raise self._classify(resp["error_code"])
        self._retrying(once, deadline_ms, refind="txn")
        tm.offsets_added = True

    def txn_offset_commit(self, group: Any, offsets: dict[str, list[dict[str, Any]]], deadline_ms: int) -> None:
        """TxnOffsetCommit to the group's coordinator; ``group`` has group_id, generation_id,
        member_id, group_instance_id (a consumer's group metadata)."""
        tm = self._tm
        gnode: list[int | None] = [None]

        def once() -> None:
            if gnode[0] is None:
                gnode[0] = self._find(group.group_id, _KEY_GROUP, deadline_ms)
            body = {"transactional_id": tm.transactional_id, "group_id": group.group_id,
                    "producer_id": tm.producer_id, "producer_epoch": tm.epoch,
                    "generation_id": group.generation_id, "member_id": group.member_id or "",
                    "group_instance_id": group.group_instance_id,
                    "topics": [{"name": t, "partitions": ps} for t, ps in offsets.items()]}
            resp = self._net.request(gnode[0], "TxnOffsetCommit", body, self._left(deadline_ms))
            for t in resp["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        err = self._classify(p["error_code"], f"{t['name']}[{p['partition_index']}]")
                        if isinstance(err, _Retry) and err.moved:
                            gnode[0] = None
                        raise err
        self._retrying(once, deadline_ms, refind=None)

    def end_txn(self, committed: bool, deadline_ms: int) -> None:
        tm = self._tm

        def once() -> None:
            node = self._coordinator(deadline_ms)
            # EndTxn v5 (KIP-890 part 2) bumps the epoch per transaction; kwire uses the first
            # transaction protocol (as librdkafka does), so it stays at v4.
            f = self._net.send(node, "EndTxn", {
                "transactional_id": tm.transactional_id, "producer_id": tm.producer_id,
                "producer_epoch": tm.epoch, "committed": committed},
                timeout_ms=self._left(deadline_ms), max_version=4)
            resp = self._net.wait(f).result()
            assert resp is not None
            if resp["error_code"]:
                raise self._classify(resp["error_code"])
        self._retrying(once, deadline_ms, refind="txn")

    # --- asynchronous: idempotent producer id, AddPartitionsToTxn -----------------------------
    def start_init_pid(self) -> None:
        """Idempotent (not transactional) producer: InitProducerId to any broker, answered in
        the driver's poll.  Errors are retried; fatal ones make the producer fatal."""
        if self._pid_inflight or now_ms() < self._next_pid_ms:
            return
        self._pid_inflight = True
        f = self._net.send(None, "InitProducerId", self._init_body)

        def done(f: InFlight) -> None:
            self._pid_inflight = False
            if f.error is not None:
                self._next_pid_ms = now_ms() + self._backoff_ms  # asked again after the backoff
                return
            assert f.response is not None
            code = f.response["error_code"]
            if code in FATAL_CODES:
                self._tm.set_fatal(for_code(code))
            elif not code:
                self._tm.set_identity(f.response["producer_id"], f.response["producer_epoch"])
            else:
                self._next_pid_ms = now_ms() + self._backoff_ms
        f.add_callback(done)

    def next_wake_ms(self, now: int, need_pid: bool) -> int:
        """When the driver must run again: to retry AddPartitionsToTxn, or (``need_pid``:
        records wait for a producer id) InitProducerId."""
        t = now + 1000
        if self._tm.pending and not self._adding:
            t = min(t, max(now, self._next_add_ms))
        if need_pid and not self._pid_inflight:
            t = min(t, max(now, self._next_pid_ms))
        return t

    def maybe_add_partitions(self, now: int) -> None:
        """Send AddPartitionsToTxn for the partitions waiting for it (one request at a time)."""
        tm = self._tm
        if self._adding or not tm.pending or now < self._next_add_ms:
            return
        if self._node is None:
            try:
                self._coordinator(now + self._request_timeout_ms)
            except KwireError as exc:
                self._add_failed(exc)
                return
        topics = tm.add_partitions_topics()
        asked = {(t, p) for t, ps in topics.items() for p in ps}
        body = {"v3_and_below_transactional_id": tm.transactional_id,
                "v3_and_below_producer_id": tm.producer_id,
                "v3_and_below_producer_epoch": tm.epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        self._adding = True
        f = self._net.send(self._node, "AddPartitionsToTxn", body, max_version=3)
        f.add_callback(lambda f: self._on_added(f, asked))

    def _on_added(self, f: InFlight, asked: set[tuple[str, int]]) -> None:
        self._adding = False
        tm = self._tm
        if f.error is not None:
            self._add_failed(f.error)
            return
        errors: list[BrokerError] = []
        assert f.response is not None
        for t in f.response.get("results_by_topic_v3_and_below", ()):
            for p in t["results_by_partition"]:
                tp = (t["name"], p["partition_index"])
                code = p["partition_error_code"]
                if not code:
                    tm.pending.discard(tp)
                    tm.partitions.add(tp)
                else:  # OPERATION_NOT_ATTEMPTED (55): failed because another partition did
                    errors.append(for_code(code, f"AddPartitionsToTxn {tp[0]}[{tp[1]}]"))
        real = [e for e in errors if e.code != 55]
        if real:
            self._add_failed(real[0])

    def _add_failed(self, err: BaseException) -> None:
        code = err.code if isinstance(err, BrokerError) else None
        if code in FATAL_CODES:
            self._tm.set_fatal(err)
            return
        retriable = code in COORDINATOR_RETRY_CODES or isinstance(err, (KafkaConnectionError, KafkaTimeoutError)) \
            or (isinstance(err, BrokerError) and err.retriable)
        if retriable:
            if code in COORDINATOR_MOVED_CODES or code is None:
                self._node = None
            self._next_add_ms = now_ms() + (20 if code == CONCURRENT_TRANSACTIONS else self._backoff_ms)
            return
        self._tm.set_abortable(err)

    # --- helpers --------------------------------------------------------------------------------
    def _init_body(self, version: int) -> dict[str, Any]:
        tm = self._tm
        return {"transactional_id": tm.transactional_id,
                "transaction_timeout_ms": tm.transaction_timeout_ms,
                "producer_id": -1, "producer_epoch": -1}

    def _left(self, deadline_ms: int) -> int:
        left = deadline_ms - now_ms()
        if left <= 0:
            raise KafkaTimeoutError("transactional call timed out")
        return min(left, self._request_timeout_ms)

    @staticmethod
    def _classify(code: int, message: str | None = None) -> Exception:
        err = for_code(code, message)
        if code in COORDINATOR_RETRY_CODES:
            return _Retry(err, code in COORDINATOR_MOVED_CODES)
        return err

    def _retrying(self, once: Callable[[], Any], deadline_ms: int, *, refind: str | None) -> Any:
        """``once()`` until it succeeds, raises a non-retriable error, or the deadline passes
        (then KafkaTimeoutError, retriable: the call may be made again)."""
        last: BaseException | None = None
        while True:
            try:
                return once()
            except _Retry as r:
                last = r.err
                if r.moved and refind == "txn":
                    self._node = None
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                last = exc
                if refind == "txn":
                    self._node = None
            if now_ms() + self._backoff_ms >= deadline_ms:
                raise KafkaTimeoutError(f"transactional call timed out (last error: {last})")
            self._pump(20 if isinstance(last, BrokerError) and last.code == CONCURRENT_TRANSACTIONS
                       else self._backoff_ms)
