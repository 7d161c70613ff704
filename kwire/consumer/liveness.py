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
