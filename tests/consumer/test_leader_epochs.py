"""KIP-320 position validation after a seek(), against the fake cluster (fake clock, no I/O).

A seek() knows no leader epoch.  The first Fetch the leader accepts says which epoch the
position stands under, so the next leader change is validated with OffsetForLeaderEpoch, as
Kafka's Java consumer does -- not adopted unchecked.  (Found on Apache Kafka:
tests/test_kafka_cluster.py, the sigkill-after-seek case.)
"""
from __future__ import annotations

import pytest

from kwire.consumer.subscription import FetchState, Position

from .fakes import FakeCluster
from .test_fetcher import Setup, fill


@pytest.fixture
def cluster():
    c = FakeCluster(nodes=(1, 2))
    c.create_topic("t", 4)
    return c


def test_seek_then_leader_change_is_validated(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 10)
    s = Setup(cluster)
    s.driver.run(50)              # metadata current before the seek: no update follows it
    s.assign([tp], start=3)       # seek(): Position(3, None, None)
    assert s.subs.position(tp) == Position(3, None, None)
    s.run_until(lambda: len(s.records()) == 7)
    assert s.subs.position(tp) == Position(10, 0, 0)   # the epoch the fetch went out under
    cluster.epoch_ends[tp][0] = 10
    cluster.leader_epochs[tp] = 1
    s.md.request_update()
    s.run_until(lambda: any(x[2] == "OffsetForLeaderEpoch" for x in cluster.log))
    s.run_until(lambda: s.subs.state(tp).state is FetchState.FETCHING)
    assert s.subs.position(tp) == Position(10, 0, 1)


def test_a_known_leader_epoch_is_not_replaced_by_the_fetch(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 5)
    s = Setup(cluster)
    s.assign([tp], start=0)
    s.run_until(lambda: len(s.records()) == 5)
    st = s.subs.state(tp)
    st.position = st.position._replace(current_leader_epoch=7)
    s.subs.advance(tp, 6, None, 3)
    assert s.subs.position(tp) == Position(6, 0, 7)
