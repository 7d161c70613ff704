"""The states of a consumer group member (classic and KIP-848), shared by the membership
machines and the offsets machines beside them."""
from __future__ import annotations

import enum


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    FIND_COORDINATOR = "find_coordinator"
    PREPARING = "preparing"  # eager: revoking everything (and committing) before JoinGroup
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    LEAVING = "leaving"
    CLOSED = "closed"
