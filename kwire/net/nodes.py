"""The client's connections, one per node, and which of them a request goes to.  No I/O.

:class:`Nodes` is the one owner of the node id -> :class:`~kwire.net.connection.Connection`
table: bootstrap servers (negative ids, like Java's client), brokers learned from metadata,
and the group coordinator's dedicated connections (:meth:`Nodes.group_node`).  It answers the
routing questions -- the least-loaded ready connection for a request to any broker, which
connection to try next -- from the connections' states; the network client connects and moves
bytes.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..errors import AuthenticationError, ConfigError
from .connection import SETUP_STATES, Connection, ConnState
from .metadata import Metadata

__all__ = ["Nodes", "parse_bootstrap", "GROUP_NODE_BASE", "auth_error"]

GROUP_NODE_BASE = 2**31 - 1  # group_node(n) = GROUP_NODE_BASE - n


def parse_bootstrap(servers: Iterable[str]) -> list[tuple[str, int]]:
    """``bootstrap.servers`` entries (``host:port``, ``[v6]:port``, ``PLAINTEXT://host:port``,
    ``host`` = port 9092) as (host, port)."""
    out = []
    for s in servers:
        s = s.strip()
        if not s:
            continue
        if "://" in s:  # "PLAINTEXT://host:port"
            s = s.split("://", 1)[1]
        if s.startswith("["):  # [v6addr]:port
            host, _, port = s[1:].partition("]:")
        else:
            host, sep, port = s.rpartition(":")
            if not sep:
                host, port = s, "9092"
        try:
            out.append((host, int(port)))
        except ValueError:
            raise ConfigError(f"invalid value {s!r} in configuration property 'bootstrap.servers': "
                              "expected host:port") from None
    return out


def auth_error(conns: Iterable[Connection]) -> AuthenticationError | None:
    """The authentication failure among the connections' last errors, if any."""
    for c in conns:
        if isinstance(c.last_error, AuthenticationError):
            return c.last_error
    return None


class Nodes:
    """Node id -> Connection, and the choice of connection for each request."""

    def __init__(self, bootstrap: list[tuple[str, int]], metadata: Metadata, max_frame_bytes: int) -> None:
        self.metadata = metadata
        self.max_frame_bytes = max_frame_bytes
        self.conns: dict[int, Connection] = {}
        for i, (host, port) in enumerate(bootstrap):
            node_id = -(i + 1)  # bootstrap connections have negative ids, like Java's client
            self.conns[node_id] = Connection(node_id, host, port, max_frame_bytes)

    def get(self, node_id: int) -> Connection | None:
        return self.conns.get(node_id)

    def broker(self, node_id: int) -> Connection | None:
        """The connection to ``node_id``, made from metadata on first use; None if unknown."""
        conn = self.conns.get(node_id)
        if conn is None:
            b = self.metadata.broker(node_id)
            if b is None:
                return None
            conn = self.conns[node_id] = Connection(node_id, b.host, b.port, self.max_frame_bytes)
        return conn

    def group_node(self, node_id: int, host: str | None = None, port: int | None = None) -> int:
        """The node id of a second connection to broker ``node_id`` for a group coordinator's
        traffic (see NetworkClient.group_node): 2^31 - 1 - node_id, as Kafka's Java client."""
        alias = GROUP_NODE_BASE - node_id
        conn = self.conns.get(alias)
        if host is None or port is None:
            b = self.metadata.broker(node_id)
            if b is None:
                return alias if conn is not None else node_id
            host, port = b.host, b.port
        if conn is None:
            conn = self.conns[alias] = Connection(alias, host, port, self.max_frame_bytes)
            conn.dedicated = True
        elif (conn.host, conn.port) != (host, port) and conn.state is ConnState.DISCONNECTED:
            conn.host, conn.port = host, port
        return alias

    def learn_addresses(self) -> None:
        """Brokers that moved (per the metadata just learned) are reached at their new address
        on the next connect."""
        for b in self.metadata.brokers.values():
            conn = self.conns.get(b.node_id)
            if conn is not None and (conn.host, conn.port) != (b.host, b.port) and \
                    conn.state is ConnState.DISCONNECTED:
                conn.host, conn.port = b.host, b.port

    def least_loaded_ready(self) -> Connection | None:
        best = None
        for conn in self.conns.values():
            if conn.ready and not conn.dedicated and (best is None or conn.load < best.load):
                best = conn
        return best

    def ready(self, node_id: int | None) -> Connection | None:
        """The ready connection to ``node_id`` (None: the least-loaded one), if there is one."""
        if node_id is None:
            return self.least_loaded_ready()
        conn = self.conns.get(node_id)
        return conn if conn is not None and conn.ready else None

    def candidates(self) -> list[Connection]:
        """Connections worth trying for node_id=None: known brokers first, then bootstrap."""
        out = []
        for b in self.metadata.brokers.values():
            conn = self.conns.get(b.node_id)
            if conn is None:
                conn = self.conns[b.node_id] = Connection(b.node_id, b.host, b.port, self.max_frame_bytes)
            out.append(conn)
        out.extend(c for nid, c in self.conns.items() if nid < 0)
        return out

    def connect_target(self, node_id: int | None, now_ms: int) -> Connection | None:
        """The connection to bring up for ``node_id`` (None: any broker): one being set up, else
        the first not backing off (fewest failures, oldest failure first); None if none."""
        if node_id is not None:
            return self.broker(node_id)
        cands = self.candidates()
        for conn in cands:
            if conn.state in SETUP_STATES or conn.state is ConnState.REAUTHENTICATING:
                return conn
        usable = [c for c in cands if c.state is ConnState.DISCONNECTED and now_ms >= c.next_attempt_ms]
        if usable:
            usable.sort(key=lambda c: (c.failures, c.last_failure_ms or 0))
            return usable[0]
        return None

    def all_failed_since(self, since_ms: int) -> list[Connection] | None:
        """The candidates if every one of them failed strictly after ``since_ms`` (a failure in
        that very millisecond may belong to an older connection), else None."""
        cands = self.candidates()
        if all(c.last_failure_ms is not None and c.last_failure_ms > since_ms for c in cands):
            return cands
        return None

    def last_errors(self, node_id: int | None) -> str:
        """"; address: error" for the node (None: the candidates), for error messages."""
        conns = [self.conns[node_id]] if node_id in self.conns else (
            self.candidates() if node_id is None else [])
        errs = [f"{c.address}: {c.last_error}" for c in conns if c.last_error is not None]
        return ("; " + "; ".join(errs)) if errs else ""
