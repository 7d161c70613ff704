"""What every Admin call stands on: the connections, where a request goes (a node, the
controller, a group's coordinator -- asked again while it is loading or moving), and how
results and errors are returned."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..errors import BrokerError, ProtocolError, for_code
from ..net import BrokerInfo, NetworkClient
from ..net.connection import InFlight
from .types import BrokerNode

_COORDINATOR_RETRY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def _ms(timeout_s: float | None, default_ms: int) -> int:
    return default_ms if timeout_s is None else max(0, int(timeout_s * 1000))


def _error(code: int, message: str | None, **where: Any) -> BrokerError:
    """The typed error of code ``code`` (non-zero), with ``.topic`` / ``.group`` ... set."""
    err = for_code(code, message)
    for k, v in where.items():
        setattr(err, k, v)
    return err


def _err(code: int, message: str | None, **where: Any) -> BrokerError | None:
    """The typed error of a non-zero code (with ``.topic`` / ``.group`` set), else None."""
    return _error(code, message, **where) if code else None


def _results(out: dict[Any, Any], raise_on_error: bool) -> dict[Any, Any]:
    """``out`` as it is, or with ``raise_on_error`` its first error raised."""
    if raise_on_error:
        for v in out.values():
            if isinstance(v, BaseException):
                raise v
    return out


class AdminBase:
    """The connections and the plumbing the call groups share (see :class:`kwire.admin.Admin`)."""

    config: Config
    _net: NetworkClient

    # --- plumbing ----------------------------------------------------------------------------------
    def _call(self, node: int | None, api: str, body: dict[str, Any] | Callable[[int], dict[str, Any]],
              timeout_ms: int, *, max_version: int | None = None, min_version: int | None = None
              ) -> dict[str, Any]:
        f = self._net.send(node, api, body, timeout_ms=timeout_ms, max_version=max_version,
                           min_version=min_version)
        return self._answer(f)

    def _answer(self, f: InFlight) -> dict[str, Any]:
        """The decoded answer of a request sent with ``self._net.send`` (its error raised)."""
        resp = self._net.wait(f).result()
        if resp is None:  # (only requests that expect no answer have none)
            raise ProtocolError(f"{f.api} was answered with nothing")
        return resp

    def _know_broker(self, node_id: int, timeout_ms: int) -> None:
        """Requests to ``node_id`` need its address: refresh metadata when it is not known."""
        if self._net.metadata.broker(node_id) is None:
            self._net.refresh_metadata([], timeout_ms)

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

    def _broker_node(self, node: int) -> BrokerNode:
        b = self._net.metadata.broker(node)
        return BrokerNode(node, b.host, b.port, b.rack) if b else BrokerNode(node, "", -1)

    def _per_group(self, group_ids: list[str], one: Callable[[int, str, int], Any],
                   timeout: float | None) -> dict[str, Any]:
        """``one(coordinator_node, group_id, timeout_ms)`` for each group, retried (with a new
        FindCoordinator) while the coordinator is loading, unavailable or has moved."""
        timeout_ms = _ms(timeout, self.config.socket_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        out: dict[str, Any] = {}
        for g in group_ids:
            while True:
                left_ms = max(1, int((deadline - time.monotonic()) * 1000))
                node = self._find_coordinator(g, left_ms)
                res = node if isinstance(node, BaseException) else one(node, g, left_ms)
                if isinstance(res, BrokerError) and res.code in _COORDINATOR_RETRY \
                        and time.monotonic() + self.config.retry_backoff_ms / 1000 < deadline:
                    time.sleep(self.config.retry_backoff_ms / 1000)
                    continue
                out[g] = res
                break
        return out

    def _find_coordinator(self, group_id: str, timeout_ms: int) -> int | BrokerError:
        resp = self._call(None, "FindCoordinator",
                          {"key": group_id, "key_type": 0, "coordinator_keys": [group_id]}, timeout_ms)
        c = next((c for c in resp["coordinators"] if c.get("key") == group_id),
                 resp["coordinators"][0]) if resp.get("coordinators") else resp
        err = _err(c["error_code"], c.get("error_message"), group=group_id)
        if err is not None:
            return err
        node = c["node_id"]
        self._know_broker(node, timeout_ms)
        md = self._net.metadata
        if md.broker(node) is None:  # a coordinator the metadata does not list: its address
            md.brokers[node] = BrokerInfo(node, c["host"], c["port"])
        return int(node)
