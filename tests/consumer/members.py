"""Group members for state-machine tests: a SubscriptionState + ClassicGroupMember (+ optional
PositionManager and Fetcher) standing in for a consumer, with an "application" that polls and
acknowledges revocations at once unless told otherwise."""
from __future__ import annotations

from kwire.consumer.assignors import get_assignor
from kwire.consumer.classic import ClassicGroupMember
from kwire.consumer.subscription import SubscriptionState
from kwire.consumer.types import (
    AssignPartitions,
    CommitResult,
    ErrorAction,
    LosePartitions,
    RevokePartitions,
)


class GroupMember:
    def __init__(self, cluster, driver, *, group="g", topics=("t",), assignors=("range",),
                 instance_id=None, session_timeout_ms=6000, heartbeat_interval_ms=500,
                 max_poll_interval_ms=30000, auto_commit=False, auto_commit_interval_ms=1000,
                 retry_backoff_ms=100, reset="earliest", name=None):
        self.cluster = cluster
        self.driver = driver
        self.name = name or f"member-{id(self) % 1000}"
        self.subs = SubscriptionState(reset)
        if topics:
            self.subs.subscribe(topics)
        self.coord = ClassicGroupMember(
            self.subs, group_id=group, assignors=[get_assignor(a) for a in assignors],
            group_instance_id=instance_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            retry_backoff_ms=retry_backoff_ms, enable_auto_commit=auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms, now_ms=driver.clock.now_ms)
        self.coord.on_metadata(cluster.topics, cluster.topic_ids)
        self.actions: list = []
        self.app_polling = True
        self.auto_ack = True
        self.owned: set = set()        # what the application believes it owns
        self.history: list = []        # (now, action)
        driver.add(self)

    @property
    def coordinator_id(self):
        return self.coord.coordinator_id

    @property
    def state(self):
        return self.coord.state

    def poll(self, now_ms):
        if self.app_polling:
            self.coord.on_app_poll(now_ms)
        if self.coord.needs_metadata:
            self.coord.on_metadata(self.cluster.topics, self.cluster.topic_ids, now_ms)
        reqs = self.coord.poll(now_ms)
        self._actions(now_ms)
        return reqs

    def on_response(self, req, resp, now_ms):
        self.coord.on_response(req, resp, now_ms)
        self._actions(now_ms)

    def _actions(self, now_ms):
        for a in self.coord.drain_actions():
            self.actions.append(a)
            self.history.append((now_ms, a))
            if isinstance(a, AssignPartitions):
                self.owned |= set(a.partitions)
            elif isinstance(a, RevokePartitions):
                self.owned -= set(a.partitions)
                if self.auto_ack:
                    self.coord.ack_revoke(a.ack_id, now_ms)
            elif isinstance(a, LosePartitions):
                self.owned -= set(a.partitions)

    def of(self, kind):
        return [a for a in self.actions if isinstance(a, kind)]

    def errors(self):
        return [a.error for a in self.of(ErrorAction)]

    def commits(self):
        return self.of(CommitResult)
