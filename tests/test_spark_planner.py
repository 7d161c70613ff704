"""The Spark source's options and planner: pure functions, no Spark, no broker."""
from __future__ import annotations

import pickle
import random
import subprocess
import sys

import pytest

from kwire.errors import ConfigError, KwireError, NoOffsetForPartitionError
from kwire.spark import planner as P
from kwire.spark.options import OffsetSpec, parse_options

BOOT = {"kafka.bootstrap.servers": "h:9092"}


def opts(streaming=False, **kw):
    return parse_options({**BOOT, **kw}, streaming=streaming)


# --- options ----------------------------------------------------------------------------------

def test_minimal_options_and_defaults():
    o = opts(subscribe="a, b ,a")
    assert o.subscribe == ("a", "b")
    assert o.starting == OffsetSpec("earliest") and o.ending == OffsetSpec("latest")
    assert o.fail_on_data_loss and not o.include_headers
    assert o.bootstrap_servers == "h:9092"
    assert o.isolation_level == 1  # kwire's default, read_committed
    assert opts(subscribe="a", **{"kafka.isolation.level": "read_uncommitted"}).isolation_level == 0
    s = opts(streaming=True, subscribe="a")
    assert s.starting == OffsetSpec("latest")  # Spark's default for streams


def test_option_names_are_case_insensitive_and_values_may_be_python():
    o = parse_options({**BOOT, "SUBSCRIBE": "t", "startingoffsets": {"t": {"0": 5}}, "FailOnDataLoss": False,
                       "minpartitions": 4, "includeHeaders": True})
    assert o.starting.offsets == (("t", 0, 5),)
    assert not o.fail_on_data_loss and o.include_headers and o.min_partitions == 4


def test_options_pickle():
    o = opts(assign='{"t": [1, 0]}', startingOffsetsByTimestamp='{"t": {"0": 10}}')
    assert pickle.loads(pickle.dumps(o)) == o
    assert o.assign == (("t", 0), ("t", 1))


@pytest.mark.parametrize("bad, match", [
    ({"subscribe": "t", "startingOfsets": "earliest"}, "unknown option 'startingOfsets'"),
    ({"subscribe": "t", "kafka.no.such.property": "1"}, "no.such.property"),
    ({"subscribe": "t", "kafka.fetch.max.bytes": "lots"}, "fetch.max.bytes"),
    ({"subscribe": "t", "kafka.enable.auto.commit": "true"}, "commitToGroup"),
    ({}, "exactly one of"),
    ({"subscribe": "t", "assign": '{"t": [0]}'}, "exactly one of"),
    ({"subscribe": " , "}, "names no topic"),
    ({"subscribePattern": "(unclosed"}, "invalid regular expression"),
    ({"assign": '{"t": [0,]}'}, "malformed JSON"),
    ({"assign": '{"t": 0}'}, "list of partition numbers"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": 1'}, "malformed JSON"),
    ({"subscribe": "t", "startingOffsets": '["t"]'}, "expected a JSON object"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, "not a partition number"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": "1"}}'}, "must be an integer"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "invalid"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, "not allowed as a starting offset"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "not allowed for a batch query"),
    ({"subscribe": "t", "startingOffsets": "soon"}, "expected earliest"),
    ({"subscribe": "t", "startingOffsets": "{}"}, "names no partition"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, "not allowed as an ending offset"),
    ({"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, "not allowed as an ending offset"),
    ({"subscribe": "t", "endingOffsets": "group"}, "starting position only"),
    ({"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": -5}}'}, "must be >= 0"),
    ({"subscribe": "t", "startingTimestamp": "1", "startingOffsets": "earliest"}, "give one"),
    ({"subscribe": "t", "endingTimestamp": "1", "endingOffsets": "latest"}, "give one"),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "maybe"}, "error or latest"),
    ({"subscribe": "t", "startingOffsets": "group"}, "needs a group"),
    ({"subscribe": "t", "minPartitions": "0"}, "at least 1"),
    ({"subscribe": "t", "maxRecordsPerPartition": "x"}, "expected an integer"),
    ({"subscribe": "t", "failOnDataLoss": "perhaps"}, "true or false"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "10"}, "streaming queries"),
    ({"subscribe": "t", "maxPartitions": "0"}, "at least 1"),
    ({"subscribe": "t", "maxPartitions": "2", "minPartitions": "4"}, "use one or the other"),
    ({"subscribe": "t", "maxPartitions": "2", "maxRecordsPerPartition": "9"}, "use one or the other"),
])
def test_bad_options_name_the_problem(bad, match):
    with pytest.raises(ConfigError, match=match):
        parse_options({**BOOT, **bad})


def test_bootstrap_servers_required():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        parse_options({"subscribe": "t"})


def test_streaming_rules():
    assert opts(streaming=True, subscribe="t", startingOffsets="latest").starting.kind == "latest"
    assert opts(streaming=True, subscribe="t", startingOffsets='{"t": {"0": -1}}').starting.kind == "offsets"
    assert opts(streaming=True, subscribe="t", maxOffsetsPerTrigger=10).max_offsets_per_trigger == 10
    with pytest.raises(ConfigError, match="batch queries only"):
        opts(streaming=True, subscribe="t", endingOffsets="latest")


def test_group_start_options():
    o = opts(subscribe="t", startingOffsets="group", **{"kafka.group.id": "g", "kafka.auto.offset.reset": "earliest"})
    assert o.starting.kind == "group" and o.group_id == "g" and o.auto_offset_reset == "earliest"
    o = opts(subscribe="t", startingOffsets="GROUP", commitToGroup="c")
    assert o.group_id == "c" and o.commit_group == "c"
    assert opts(subscribe="t", **{"kafka.enable.auto.commit": "false"}).kafka.get("enable.auto.commit") is None


def test_offset_spec_json_round_trip():
    o = opts(subscribe="t", startingOffsets='{"t": {"1": 7, "0": -2}}', endingOffsetsByTimestamp='{"t": {"0": 99}}')
    assert o.starting.to_json() == '{"t": {"0": -2, "1": 7}}'
    assert o.ending.kind == "timestamps" and o.ending.default == "latest"
    assert opts(subscribe="t", startingTimestamp=5).starting == OffsetSpec("timestamp", timestamp=5)


# --- resolving positions ------------------------------------------------------------------------

TPS = [("t", 0), ("t", 1), ("t", 2)]
EARLIEST = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
LATEST = {("t", 0): 100, ("t", 1): 20, ("t", 2): 5}


def test_resolve_earliest_latest_and_specific():
    assert P.resolve(OffsetSpec("earliest"), TPS, earliest=EARLIEST, latest=LATEST) == EARLIEST
    assert P.resolve(OffsetSpec("latest"), TPS, earliest=EARLIEST, latest=LATEST) == LATEST
    spec = opts(streaming=True, subscribe="t", startingOffsets='{"t": {"0": 42, "1": -1}}').starting
    assert P.resolve(spec, TPS, earliest=EARLIEST, latest=LATEST) == {("t", 0): 42, ("t", 1): 20, ("t", 2): 5}
    end = opts(subscribe="t", endingOffsets='{"t": {"0": 50, "2": -1}}').ending
    assert P.resolve(end, TPS, earliest=EARLIEST, latest=LATEST, ending=True) == \
        {("t", 0): 50, ("t", 1): 20, ("t", 2): 5}


def test_resolve_group_with_fallbacks():
    committed = {("t", 0): 33, ("t", 1): None, ("t", 2): -1}
    spec = OffsetSpec("group")
    got = P.resolve(spec, TPS, earliest=EARLIEST, latest=LATEST, committed=committed, auto_offset_reset="earliest")
    assert got == {("t", 0): 33, ("t", 1): 10, ("t", 2): 5}
    got = P.resolve(spec, TPS, earliest=EARLIEST, latest=LATEST, committed=committed, auto_offset_reset="latest")
    assert got == {("t", 0): 33, ("t", 1): 20, ("t", 2): 5}
    with pytest.raises(NoOffsetForPartitionError, match="t-1"):
        P.resolve(spec, TPS, earliest=EARLIEST, latest=LATEST, committed=committed, auto_offset_reset="error")


def test_resolve_timestamps():
    spec = OffsetSpec("timestamps", timestamps=(("t", 0, 1000), ("t", 1, 2000)))
    assert P.timestamp_queries(spec, TPS) == {("t", 0): 1000, ("t", 1): 2000}
    found = {("t", 0): 7, ("t", 1): None}
    with pytest.raises(KwireError, match="no record at or after the starting timestamp 2000"):
        P.resolve(spec, TPS, earliest=EARLIEST, latest=LATEST, found=found)
    got = P.resolve(spec, TPS, earliest=EARLIEST, latest=LATEST, found=found, timestamp_strategy="latest")
    assert got == {("t", 0): 7, ("t", 1): 20, ("t", 2): 5}  # t-2 unnamed: the default, earliest
    end = OffsetSpec("timestamps", timestamps=spec.timestamps, default="latest")
    assert P.resolve(end, TPS, earliest=EARLIEST, latest=LATEST, found=found, ending=True) == \
        {("t", 0): 7, ("t", 1): 20, ("t", 2): 5}
    one = OffsetSpec("timestamp", timestamp=5)
    assert P.timestamp_queries(one, TPS) == {tp: 5 for tp in TPS}


def test_named_partitions_must_be_read():
    spec = OffsetSpec("offsets", offsets=(("t", 0, 1), ("u", 3, 4)))
    with pytest.raises(ConfigError, match="u-3"):
        P.check_named_partitions(spec, TPS, "startingOffsets")
    P.check_named_partitions(spec, TPS + [("u", 3)], "startingOffsets")


# --- ranges and data loss --------------------------------------------------------------------------

def test_plan_ranges_basic_and_empty_dropped():
    plan = P.plan_ranges({("t", 0): 3, ("t", 1): 20}, {("t", 0): 10, ("t", 1): 20}, earliest=EARLIEST, latest=LATEST)
    assert plan.ranges == [P.OffsetRange("t", 0, 3, 10)]
    assert plan.total == 7 and not plan.warnings
    kept = P.plan_ranges({("t", 1): 20}, {("t", 1): 20}, keep_empty=True)
    assert kept.ranges == [P.OffsetRange("t", 1, 20, 20)]


def test_data_loss_below_log_start():
    start, end = {("t", 1): 4}, {("t", 1): 20}
    with pytest.raises(P.DataLossError, match=r"t-1: offsets 4\.\.9 requested but the log starts at 10"):
        P.plan_ranges(start, end, earliest=EARLIEST, latest=LATEST)
    plan = P.plan_ranges(start, end, earliest=EARLIEST, latest=LATEST, fail_on_data_loss=False)
    assert plan.ranges == [P.OffsetRange("t", 1, 10, 20)]
    assert "skipped" in plan.warnings[0] and plan.start[("t", 1)] == 10


def test_data_loss_start_after_end_and_end_past_log():
    with pytest.raises(P.DataLossError, match="starting offset 150 is after the ending offset 100"):
        P.plan_ranges({("t", 0): 150}, {("t", 0): 100}, earliest=EARLIEST, latest=LATEST)
    plan = P.plan_ranges({("t", 0): 150}, {("t", 0): 100}, fail_on_data_loss=False)
    assert plan.ranges == [] and len(plan.warnings) == 1
    with pytest.raises(P.DataLossError, match="past the end of the log"):
        P.plan_ranges({("t", 0): 0}, {("t", 0): 130}, earliest=EARLIEST, latest=LATEST)
    plan = P.plan_ranges({("t", 0): 0}, {("t", 0): 130}, earliest=EARLIEST, latest=LATEST, fail_on_data_loss=False)
    assert plan.ranges == [P.OffsetRange("t", 0, 0, 100)]
    # everything requested was deleted: one warning, an empty range
    plan = P.plan_ranges({("t", 1): 2}, {("t", 1): 8}, earliest=EARLIEST, latest=LATEST, fail_on_data_loss=False)
    assert plan.ranges == [] and len(plan.warnings) == 1


def test_gone_and_new_partitions():
    with pytest.raises(P.DataLossError, match="t-2 is gone"):
        P.plan_ranges({("t", 2): 1}, {("t", 0): 5}, earliest=EARLIEST)
    plan = P.plan_ranges({("t", 2): 1}, {("t", 0): 5, ("t", 1): 12}, earliest=EARLIEST, fail_on_data_loss=False)
    assert plan.ranges == [P.OffsetRange("t", 0, 0, 5), P.OffsetRange("t", 1, 10, 12)]  # new: from earliest


def _covers(original, parts):
    by_tp = {}
    for r in parts:
        by_tp.setdefault(r.tp, []).append(r)
    for r in original:
        pieces = sorted(by_tp.get(r.tp, []))
        assert pieces[0].from_offset == r.from_offset and pieces[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in zip(pieces, pieces[1:]))
        assert all(p.size > 0 for p in pieces)


def test_split_by_max_records():
    ranges = [P.OffsetRange("t", 0, 0, 100), P.OffsetRange("t", 1, 0, 7)]
    parts = P.split_ranges(ranges, max_records_per_partition=30)
    assert [p.size for p in parts] == [25, 25, 25, 25, 7]
    _covers(ranges, parts)


def test_split_by_min_partitions_goes_to_the_big_ranges():
    ranges = [P.OffsetRange("t", 0, 0, 90), P.OffsetRange("t", 1, 0, 10)]
    parts = P.split_ranges(ranges, min_partitions=5)
    assert len(parts) == 5
    assert sorted(p.size for p in parts if p.partition == 0) == [22, 22, 23, 23]
    _covers(ranges, parts)
    # cannot cut below one offset per part
    tiny = [P.OffsetRange("t", 0, 0, 2)]
    assert [p.size for p in P.split_ranges(tiny, min_partitions=10)] == [1, 1]


def test_split_property():
    rng = random.Random(7)
    for _ in range(200):
        ranges = [P.OffsetRange("t", i, a, a + rng.randint(1, 500)) for i, a in
                  enumerate(rng.randint(0, 1000) for _ in range(rng.randint(1, 6)))]
        minp = rng.choice([None, rng.randint(1, 40)])
        maxr = rng.choice([None, rng.randint(1, 300)])
        parts = P.split_ranges(ranges, min_partitions=minp, max_records_per_partition=maxr)
        _covers(ranges, parts)
        total = sum(r.size for r in ranges)
        if minp:
            assert len(parts) >= min(minp, total)
        if maxr:
            assert max(p.size for p in parts) <= maxr
        for r in ranges:
            sizes = [p.size for p in parts if p.tp == r.tp]
            assert max(sizes) - min(sizes) <= 1


def test_balance_ranges_makes_whole_rounds_of_tasks():
    three = [P.OffsetRange("t", p, 0, 1_000_000) for p in range(3)]
    parts = P.balance_ranges(three, 2)  # two tasks then one alone -> four parts: two rounds
    assert sorted(p.size for p in parts) == [500_000, 500_000, 1_000_000, 1_000_000]
    _covers(three, parts)
    assert P.balance_ranges(three, 3) == three  # already whole rounds
    assert P.balance_ranges(three, 1) == three
    assert len(P.balance_ranges(three[:2], 4)) == 4  # one round of half-size tasks
    # the minimum allows only three parts: one range stays whole, no sooner done
    assert P.balance_ranges(three[:2], 4, min_part_offsets=700_000) == three[:2]
    five = [P.OffsetRange("t", p, 0, 2_000_000) for p in range(5)] + [P.OffsetRange("t", 9, 7, 7)]
    parts = P.balance_ranges(five, 4)  # 8 parts wanted, 20 possible at 500,000 each
    assert len([p for p in parts if p.size]) == 8 and P.OffsetRange("t", 9, 7, 7) in parts
    _covers(five[:5], [p for p in parts if p.size])
    # only 6 parts of the minimum: still sooner (two rounds: 1.5 ranges' time instead of 2)
    assert len([p for p in P.balance_ranges(five, 4, min_part_offsets=1_600_000) if p.size]) == 6
    small = [P.OffsetRange("t", p, 0, 300_000) for p in range(3)]  # parts of 150,000
    assert P.balance_ranges(small, 2) == small  # not worth the extra task
    assert P.balance_ranges([], 2) == []


def test_batch_layout_packs_one_task_per_core_only_when_asked():
    three = [P.OffsetRange("t", p, 0, 1_000_000) for p in range(3)]
    ranges, pack = P.batch_layout(three, 2, pack=True)  # four even parts, then two tasks
    assert pack == 2 and sorted(p.size for p in ranges) == [500_000, 500_000, 1_000_000, 1_000_000]
    assert sorted(sum(r.size for r in g) for g in P.task_groups(ranges, pack)) == [1_500_000, 1_500_000]
    assert P.batch_layout(three, 2, pack=False) == (ranges, None)  # a cluster: Spark's tasks, balanced
    assert P.batch_layout(three, 3, pack=True) == (three, None)  # a task per core already
    assert P.batch_layout(three, 4, pack=True)[1] is None  # fewer parts than cores: nothing to pack
    small = [P.OffsetRange("t", p, 0, 1000) for p in range(5)] + [P.OffsetRange("t", 7, 3, 3)]
    ranges, pack = P.batch_layout(small, 2, pack=True)  # too small to cut; five non-empty ranges
    assert ranges == small and pack == 2
    assert sorted(sum(r.size for r in g) for g in P.task_groups(ranges, pack)) == [2000, 3000]
    assert P.batch_layout(small[:2] + small[5:], 2, pack=True) == (small[:2] + small[5:], None)  # empties do not count


def test_packing_is_for_local_masters_only():
    from kwire.spark.dataframe import _local_mode

    assert all(_local_mode(m) for m in ("local", "local[2]", "local[*]", "local[4, 3]", " local[2] "))
    assert not any(_local_mode(m) for m in ("local-cluster[2, 1, 1024]", "spark://h:7077", "yarn",
                                            "k8s://https://h", None, ""))


def test_pack_ranges_into_fewer_tasks():
    ranges = [P.OffsetRange("t", p, 0, n) for p, n in enumerate([20, 18, 16, 14, 12, 0])]
    groups = P.pack_ranges(ranges, 2)
    assert [[r.partition for r in g] for g in groups] == [[0, 3, 4], [1, 2]]  # 46 and 34 records
    assert P.pack_ranges(ranges, 10) == [[r] for r in sorted(ranges[:5], key=lambda r: -r.size)]
    assert P.pack_ranges(ranges, 1) == [sorted(ranges[:5])]
    assert P.pack_ranges([], 4) == [] and P.pack_ranges([P.OffsetRange("t", 0, 5, 5)], 4) == []
    with pytest.raises(ValueError):
        P.pack_ranges(ranges, 0)


def test_task_groups():
    ranges = [P.OffsetRange("t", p, 0, n) for p, n in enumerate([5, 0, 9])]
    assert P.task_groups(ranges) == [[r] for r in ranges]  # Spark's layout, empty ranges too
    assert P.task_groups(ranges, 1) == [[ranges[0], ranges[2]]]
    assert parse_options({**BOOT, "subscribe": "t", "maxpartitions": "3"}).max_partitions == 3
    assert parse_options({**BOOT, "subscribe": "t"}).max_partitions is None


def test_pack_ranges_property():
    rng = random.Random(11)
    for _ in range(300):
        ranges = [P.OffsetRange(rng.choice("ab"), i, a, a + rng.randint(0, 400))
                  for i, a in enumerate(rng.randint(0, 1000) for _ in range(rng.randint(0, 12)))]
        slots = rng.randint(1, 6)
        groups = P.pack_ranges(ranges, slots)
        flat = [r for g in groups for r in g]
        assert sorted(flat) == sorted(r for r in ranges if r.size)  # every non-empty range, once, uncut
        assert len(groups) <= slots and all(groups) and all(g == sorted(g) for g in groups)
        if flat:  # largest-first greedy: within the biggest range of the lightest group
            totals = [sum(r.size for r in g) for g in groups]
            assert max(totals) - min(totals) <= max(r.size for r in flat)


def test_preferred_executor_is_stable_per_partition_and_across_processes():
    ex = ["exec-3", "exec-1", "exec-2"]
    a = P.preferred_executor("orders", 4, ex)
    assert a == P.preferred_executor("orders", 4, list(reversed(ex)))
    assert P.preferred_executor("orders", 4, ()) is None
    code = "from kwire.spark.planner import preferred_executor as p; print(p('orders', 4, ['exec-1','exec-2','exec-3']))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PYTHONPATH": ":".join(sys.path)}).stdout.strip()
    assert other == a
    plan = P.plan_ranges({}, {("t", 0): 100}, max_records_per_partition=10, executors=ex)
    assert len({r.preferred_executor for r in plan.ranges}) == 1  # splits of one partition agree
    spread = {P.preferred_executor("t", p, ex) for p in range(30)}
    assert spread == set(ex)


def test_lag_and_cap_offsets():
    assert P.lag({("t", 0): 90}, {("t", 0): 100, ("t", 1): 5}) == {("t", 0): 10, ("t", 1): 0}
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    latest = {("t", 0): 100, ("t", 1): 50, ("t", 2): 50}
    assert P.cap_offsets(start, latest, None) == latest
    capped = P.cap_offsets(start, latest, 30)
    assert sum(capped[tp] - start[tp] for tp in start) == 30
    assert capped == {("t", 0): 20, ("t", 1): 10, ("t", 2): 50}
    assert P.cap_offsets(start, latest, 1000) == latest
    odd = P.cap_offsets({("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, {("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, 2)
    assert sum(odd.values()) == 2


def test_offsets_json_round_trip():
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    js = P.offsets_to_json(offsets)
    assert js == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert P.offsets_from_json(js) == offsets
