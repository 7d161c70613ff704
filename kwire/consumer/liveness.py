"""max.poll.interval.ms (KIP-62): a member whose application stops calling poll() for longer
than this leaves the group, so that its partitions move on to members that make progress; it
joins again when the application polls again.  Heartbeats alone do not keep it in (they run on
the driver's thread whatever the application does).

The application's side of liveness as a small machine without I/O; the group member owns it.
The session (heartbeats answered within session.timeout.ms) is the member's own.
"""
from __future__ import annotations

from ..errors import MaxPollIntervalExceededError


class PollInterval:
    """When the application last polled, and whether the member left for want of polls."""

    def __init__(self, max_poll_interval_ms: int, now_ms: int):
        self.max_poll_interval_ms = max_poll_interval_ms
        self.last_app_poll_ms = now_ms
        self.app_in_poll = False  # the application is inside poll()/consume() (or closing)
        self.left = False  # left the group for want of polls: rejoin at the next poll

    def on_app_poll(self, now_ms: int) -> bool:
        """The application polled; True when that ends a leave for want of polls."""
        self.last_app_poll_ms = now_ms
        was, self.left = self.left, False
        return was

    def expired(self, now_ms: int) -> MaxPollIntervalExceededError | None:
        """Over the limit since the last poll: the member leaves (``left``); what to tell the
        application (else None)."""
        if self.app_in_poll:
            self.last_app_poll_ms = now_ms
            return None
        since_ms = now_ms - self.last_app_poll_ms
        if since_ms <= self.max_poll_interval_ms:
            return None
        self.left = True
        return MaxPollIntervalExceededError(
            f"no poll() for {since_ms} ms (max.poll.interval.ms={self.max_poll_interval_ms}): "
            "left the group, partitions lost; polling again rejoins")

    def deadline_ms(self) -> int | None:
        """When the limit runs out (None while the application is in poll)."""
        return None if self.app_in_poll else self.last_app_poll_ms + self.max_poll_interval_ms + 1


class Heartbeat:
    """The member's side of its session (as Kafka's Java client's ``Heartbeat``): when the next
    heartbeat is due, whether one is in flight, and when one last got through.  A member none
    of whose heartbeats got through for ``session.timeout.ms`` takes its coordinator for gone.

    Both protocols' members own one (the classic Heartbeat request, KIP-848's
    ConsumerGroupHeartbeat); ``interval_ms`` is the KIP-848 broker's to change."""

    def __init__(self, interval_ms: int, session_timeout_ms: int, retry_backoff_ms: int, now_ms: int):
        self.interval_ms = interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.in_flight = False
        self.next_ms = 0          # when the next heartbeat is due
        self.last_ok_ms = now_ms  # when one last got through (or the session began)

    def due(self, now_ms: int, due_ms: int | None = None) -> bool:
        """Whether to send one now (``due_ms``: the member's own due time, else ``next_ms``)."""
        return not self.in_flight and now_ms >= (self.next_ms if due_ms is None else due_ms)

    def sent(self, now_ms: int) -> None:
        self.in_flight = True
        self.next_ms = now_ms + self.interval_ms

    def got_through(self, now_ms: int) -> None:
        """The coordinator answered for this membership (the session lives on)."""
        self.last_ok_ms = now_ms

    def back_off(self, now_ms: int) -> None:
        """An answer to try again after: the next one after the retry backoff."""
        self.next_ms = now_ms + self.retry_backoff_ms

    def restart(self, now_ms: int, *, at_once: bool) -> None:
        """A new session (a generation joined, or the coordinator found again): it counts from
        now; the first heartbeat goes at once, or after the interval."""
        self.last_ok_ms = now_ms
        self.next_ms = now_ms if at_once else now_ms + self.interval_ms

    def session_expired(self, now_ms: int) -> bool:
        return now_ms - self.last_ok_ms > self.session_timeout_ms

    def session_deadline_ms(self) -> int:
        """When :meth:`session_expired` turns true."""
        return self.last_ok_ms + self.session_timeout_ms + 1
