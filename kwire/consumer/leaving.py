"""Leaving the group, for both group protocols: why the member leaves (close() or
unsubscribe()), when its goodbye goes out (LeaveGroup, or KIP-848's leave heartbeat), and the
goodbye owed after max.poll.interval.ms expired.

A machine of its own without I/O; the group member owns it, builds the goodbye it asks for and
makes the member's transitions.  The order it keeps: commits finish first, then one goodbye is
sent (once the coordinator is known) and answered, then the member is UNJOINED or CLOSED.

    leaving.start(close=...)                      close() or unsubscribe() was called
    leaving.step(goodbye=..., coordinator_known=..., commits_done=...)  -> LeaveStep
    leaving.answered(fire_and_forget)             the goodbye's answer came: finish now?
    leaving.finished()                            -> (UNJOINED or CLOSED, unsubscribe too?)
    leaving.owe(member_id, instance_id)           a goodbye owed without leaving (the poll limit)
    leaving.take_owed(coordinator_known)          -> (member id, instance id) to send it for
"""
from __future__ import annotations

import enum

from .member_state import MemberState


class LeaveStep(enum.Enum):
    WAIT = "wait"      # a goodbye in flight, commits not done, or no coordinator to say it to
    SEND = "send"      # send the goodbye now (it is in flight from here)
    FINISH = "finish"  # no goodbye owed, or it was answered: UNJOINED, or CLOSED when closing


class Leaving:
    """Why the member leaves, and its goodbye in flight or owed."""

    def __init__(self) -> None:
        self.closing = False        # close() was called: leave, then CLOSED
        self.unsubscribing = False  # unsubscribe() was called: leave, then UNJOINED
        self.inflight = False       # the goodbye was sent and not answered
        self.owed: tuple[str, str | None] | None = None  # (member id, instance id) left unsaid

    @property
    def requested(self) -> bool:
        """close() or unsubscribe() asked the member to leave (it does not join again)."""
        return self.closing or self.unsubscribing

    def start(self, *, close: bool) -> None:
        self.closing = self.closing or close
        self.unsubscribing = not close

    def resubscribed(self) -> None:
        self.unsubscribing = False

    def step(self, *, goodbye: bool, coordinator_known: bool, commits_done: bool) -> LeaveStep:
        """What a LEAVING member does now; ``goodbye``: the protocol owes the broker one."""
        if self.inflight or not commits_done:
            return LeaveStep.WAIT  # (commits' own deadlines bound the wait)
        if not goodbye:
            return LeaveStep.FINISH
        if not coordinator_known:
            return LeaveStep.WAIT  # the close timeout bounds this
        self.inflight = True
        return LeaveStep.SEND

    def due(self, *, coordinator_known: bool, commits_done: bool, member_id: str) -> bool:
        """Whether a LEAVING member's poll has work now."""
        return not self.inflight and commits_done and (coordinator_known or not member_id)

    def answered(self, fire_and_forget: bool) -> bool:
        """The goodbye's answer came (or its failure); True: finish leaving now."""
        if fire_and_forget:
            return False  # (the goodbye owed for the poll limit: nothing waits for it)
        self.inflight = False
        return True

    def finished(self) -> tuple[MemberState, bool]:
        """Where leaving ends -- CLOSED (close() leaves, then closes) or UNJOINED -- and whether
        the subscription goes too (unsubscribe())."""
        if self.closing:
            return MemberState.CLOSED, False
        return MemberState.UNJOINED, self.unsubscribing

    def owe(self, member_id: str, instance_id: str | None) -> None:
        self.owed = (member_id, instance_id)

    def take_owed(self, coordinator_known: bool) -> tuple[str, str | None] | None:
        """The goodbye owed, once there is a coordinator to send it to (only once)."""
        owed = self.owed
        if owed is None or not coordinator_known:
            return None
        self.owed = None
        return owed
