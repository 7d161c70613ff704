"""The member's session (kwire.consumer.liveness.Heartbeat), as the machines of both group
protocols drive it: when a heartbeat is due, what an answer, a retry and a new session do,
and when the session runs out."""
from __future__ import annotations

from kwire.consumer.liveness import Heartbeat


def test_a_heartbeat_is_due_after_the_interval_and_never_while_one_is_in_flight():
    hb = Heartbeat(interval_ms=300, session_timeout_ms=1000, retry_backoff_ms=50, now_ms=1000)
    assert hb.due(1000)  # the first one: at once
    hb.sent(1000)
    assert hb.in_flight and hb.next_ms == 1300
    assert not hb.due(5000)  # in flight: never, however late
    hb.in_flight = False  # (the answer came)
    assert not hb.due(1299) and hb.due(1300)


def test_the_members_own_due_time_replaces_the_interval():
    # KIP-848: a finished reconciliation or a new subscription is sent at once (due time 0)
    hb = Heartbeat(interval_ms=5000, session_timeout_ms=45000, retry_backoff_ms=100, now_ms=0)
    hb.sent(0)
    hb.in_flight = False
    assert not hb.due(10) and hb.due(10, due_ms=0) and not hb.due(10, due_ms=11)


def test_a_retry_waits_the_backoff_not_the_interval():
    hb = Heartbeat(interval_ms=3000, session_timeout_ms=45000, retry_backoff_ms=100, now_ms=0)
    hb.sent(0)
    hb.in_flight = False
    hb.back_off(40)  # COORDINATOR_LOAD_IN_PROGRESS
    assert hb.next_ms == 140 and not hb.due(139) and hb.due(140)


def test_the_session_runs_out_after_session_timeout_without_an_answer():
    hb = Heartbeat(interval_ms=300, session_timeout_ms=1000, retry_backoff_ms=50, now_ms=0)
    assert hb.session_deadline_ms() == 1001
    assert not hb.session_expired(1000) and hb.session_expired(1001)
    hb.got_through(700)  # an answer moves the session on, not the next heartbeat
    assert hb.next_ms == 0 and hb.session_deadline_ms() == 1701
    assert not hb.session_expired(1700) and hb.session_expired(1701)


def test_a_new_session_counts_from_now():
    hb = Heartbeat(interval_ms=300, session_timeout_ms=1000, retry_backoff_ms=50, now_ms=0)
    hb.restart(5000, at_once=False)  # a generation joined: first heartbeat after the interval
    assert (hb.last_ok_ms, hb.next_ms) == (5000, 5300) and not hb.session_expired(6000)
    hb.restart(9000, at_once=True)  # the coordinator found again: check in at once
    assert (hb.last_ok_ms, hb.next_ms) == (9000, 9000) and hb.due(9000)
