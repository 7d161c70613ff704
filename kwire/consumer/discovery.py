"""Coordinator discovery (FindCoordinator) as a machine that does no I/O.

A group's coordinator (key type 0) -- or a transactional id's (key type 1) -- is looked up
when its owner needs it, kept until the owner says it is gone (NOT_COORDINATOR, a broken
connection, a silent session), and looked up again after ``retry.backoff.ms``.  ``epoch`` is
bumped on every change, so answers to requests sent to an older coordinator are recognised.
"""
from __future__ import annotations

from typing import Any

from ..errors import KwireError
from ._codes import E
from ._codes import error as broker_error
from .types import Request

GROUP_KEY, TRANSACTION_KEY = 0, 1


class CoordinatorDiscovery:
    def __init__(self, key: str | None, *, key_type: int = GROUP_KEY, retry_backoff_ms: int = 100):
        self.key = key
        self.key_type = key_type
        self.retry_backoff_ms = retry_backoff_ms
        self.node_id: int | None = None
        self.host: str | None = None
        self.port: int | None = None
        self.epoch = 0
        self.inflight = False
        self.next_ms = 0

    def poll(self, now_ms: int, wanted: bool, *, context: Any, owner: Any) -> Request | None:
        """A FindCoordinator to send now, if the coordinator is ``wanted`` and unknown."""
        if not wanted or self.node_id is not None or self.inflight or now_ms < self.next_ms:
            return None
        key, key_type = self.key, self.key_type

        def build(version: int) -> dict[str, Any]:
            return {"key": key, "key_type": key_type, "coordinator_keys": [key]}

        self.inflight = True
        return Request(None, "FindCoordinator", build, context=context, owner=owner)

    def deadline(self, wanted: bool) -> int | None:
        if wanted and self.node_id is None and not self.inflight:
            return self.next_ms
        return None

    def on_response(self, resp: Any, now_ms: int) -> KwireError | None:
        """Take a FindCoordinator answer (or the exception it failed with).  Returns the
        error the owner must treat as fatal (authorization), else None; ``node_id`` says
        whether the coordinator is known now."""
        self.inflight = False
        if isinstance(resp, BaseException):
            self.next_ms = now_ms + self.retry_backoff_ms
            return None
        if resp.get("coordinators"):  # v4+: one entry per key asked
            c = next((c for c in resp["coordinators"] if c.get("key") == self.key),
                     resp["coordinators"][0])
        else:
            c = resp
        code = c.get("error_code", 0)
        if code != 0:
            self.next_ms = now_ms + self.retry_backoff_ms
            if code in (E.GROUP_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
                return broker_error(code, c.get("error_message"))
            return None
        self.node_id = c["node_id"]
        self.host = c.get("host")
        self.port = c.get("port")
        self.epoch += 1
        return None

    def forget(self, now_ms: int) -> bool:
        """The coordinator is gone: look it up again after the backoff.  Returns whether one
        was known."""
        was = self.node_id is not None
        self.node_id = None
        self.epoch += 1
        self.next_ms = max(self.next_ms, now_ms + self.retry_backoff_ms)
        return was
