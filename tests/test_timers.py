"""The network client's deadlines (kwire.net.timers) and node choice (kwire.net.nodes), with a
fake clock and hand-built connections: no sockets.  The same rules run against real peers in
test_net, test_faults and test_hostile_broker."""
from __future__ import annotations

from kwire.errors import KafkaConnectionError, KafkaTimeoutError
from kwire.net.connection import Connection, ConnState, InFlight
from kwire.net.metadata import Metadata
from kwire.net.nodes import GROUP_NODE_BASE, Nodes, parse_bootstrap
from kwire.net.timers import Close, Expire, Reauthenticate, Timeouts
from kwire.protocol import api as P

T = Timeouts(request_timeout_ms=30_000, setup_timeout_ms=10_000, setup_stall_ms=1_000)
METADATA = P.api("Metadata")


def conn_in(state: ConnState, since_ms: int = 0, node_id: int = 1) -> Connection:
    c = Connection(node_id, "h", 9092, 1 << 20)
    c.state, c.state_since_ms, c.last_recv_ms = state, since_ms, since_ms
    return c


def request(now_ms: int, timeout_ms: int = 5_000) -> InFlight:
    return InFlight(METADATA, {}, node_id=None, version=None, timeout_ms=timeout_ms, now_ms=now_ms)


def due(now_ms, conns, pending=()):
    return list(T.due(now_ms, conns, list(pending), waiting_note="", spare_idle_ms=10_000))


def test_setup_timeout_and_stall():
    c = conn_in(ConnState.NEGOTIATING, since_ms=0)
    assert due(999, [c]) == []
    [act] = due(1_000, [c])  # no progress for setup.stall.ms
    assert isinstance(act, Close) and act.stalled and "made no progress for 1000 ms" in str(act.error)
    c.setup_stalls = 3  # doubled per stalled attempt: 8 s
    assert T.stall_ms(c) == 8_000 and due(7_999, [c]) == []
    c.setup_stalls = 10  # capped by setup.timeout.ms, which then fires first
    c.last_recv_ms = 9_000
    [act] = due(10_000, [c])
    assert isinstance(act, Close) and not act.stalled and "timed out after 10000 ms" in str(act.error)
    assert T.next_wake_ms(0, [conn_in(ConnState.CONNECTING)], [], None, None) == 1_000


def test_requests_expire_where_they_wait():
    c = conn_in(ConnState.READY)
    queued, written, anywhere = request(0), request(0, 7_000), request(0, 3_000)
    c.queue.append(queued)
    written.correlation_id = 5
    written.sent_ms = 10
    c.in_flight[5] = written
    assert T.next_wake_ms(0, [c], [anywhere], [], None) == 3_000
    assert due(2_999, [c], [anywhere]) == []
    [a] = due(3_000, [c], [anywhere])
    assert isinstance(a, Expire) and a.f is anywhere and a.conn is None
    assert isinstance(a.error, KafkaTimeoutError)
    [a] = due(5_000, [c])
    assert a.f is queued and a.conn is c and not a.in_flight and "before it could be sent" in str(a.error)
    c.queue.clear()
    [a] = due(7_000, [c])
    assert a.f is written and a.in_flight and "got no response within 7000 ms" in str(a.error)
    assert c.abandon(5) is written and c.abandoned == {5: (10, 7_000)}
    # the abandoned answer must be complete within max(its timeout, request.timeout.ms) of sending
    assert T.next_wake_ms(7_000, [c], [], None, None) == 30_010
    assert due(30_009, [c]) == []
    [a] = due(30_010, [c])
    assert isinstance(a, Close) and isinstance(a.error, KafkaConnectionError)


def test_reauthentication_is_due_and_bounded():
    c = conn_in(ConnState.READY)
    c.reauth_at_ms = 900
    assert T.next_wake_ms(0, [c], [], None, None) == 900
    assert due(899, [c]) == []
    assert due(900, [c]) == [Reauthenticate(c)]
    c.state = ConnState.REAUTHENTICATING
    c.handshake = request(900, 30_000)
    assert due(30_899, [c]) == []
    [a] = due(30_900, [c])
    assert isinstance(a, Close) and "re-authentication" in str(a.error)


def test_metadata_and_backoff_wake_the_loop():
    c = conn_in(ConnState.DISCONNECTED)
    c.next_attempt_ms = 250
    assert T.next_wake_ms(0, [c], [], None, 400) == 400
    assert T.next_wake_ms(0, [c], [request(0)], [c], 400) == 250  # a request waits for it
    assert T.next_wake_ms(0, [], [], None, None) == 60_000


def test_nodes_choose_the_least_loaded_and_skip_dedicated():
    md = Metadata()
    md.update({"brokers": [{"node_id": 1, "host": "a", "port": 1, "rack": None},
                           {"node_id": 2, "host": "b", "port": 2, "rack": None}],
               "controller_id": 1, "topics": []}, 0, all_topics=True)
    nodes = Nodes(parse_bootstrap(["boot:9092", "[::1]:9093", "plain"]), md, 1 << 20)
    assert [(c.node_id, c.address) for c in nodes.conns.values()] == [
        (-1, "boot:9092"), (-2, "::1:9093"), (-3, "plain:9092")]
    assert nodes.least_loaded_ready() is None
    c1, c2 = nodes.broker(1), nodes.broker(2)
    assert nodes.broker(3) is None
    for c in (c1, c2):
        c.state = ConnState.READY
    c1.queue.append(request(0))
    assert nodes.least_loaded_ready() is c2 and nodes.ready(None) is c2 and nodes.ready(1) is c1
    alias = nodes.group_node(2)
    assert alias == GROUP_NODE_BASE - 2 and nodes.conns[alias].dedicated
    nodes.conns[alias].state = ConnState.READY
    c2.queue.append(request(0))
    c2.queue.append(request(0))
    assert nodes.least_loaded_ready() is c1  # never the dedicated group connection


def test_connect_target_prefers_setups_then_fewest_failures():
    nodes = Nodes(parse_bootstrap(["a:1", "b:2"]), Metadata(), 1 << 20)
    a, b = nodes.conns[-1], nodes.conns[-2]
    a.failures, a.last_failure_ms, a.next_attempt_ms = 2, 50, 0
    b.failures, b.last_failure_ms, b.next_attempt_ms = 1, 90, 500
    assert nodes.connect_target(None, 100) is a  # b backs off until 500
    assert nodes.connect_target(None, 500) is b
    a.state = ConnState.CONNECTING
    assert nodes.connect_target(None, 500) is a  # one already being set up
    a.state = ConnState.DISCONNECTED
    assert nodes.all_failed_since(40) == [a, b] and nodes.all_failed_since(50) is None
