"""The Consumer's application thread decodes the raw chunks the driver hands it (kwire.consumer.
app): real record batches, one damaged, queued as the driver queues them.  No broker: the
Consumer's driver points at a closed port and stays idle; the test plays the driver's part by
putting the Fetcher's raw chunks on the queue."""
from __future__ import annotations

from types import SimpleNamespace

from kwire import records
from kwire.consumer import Consumer
from kwire.consumer.fetcher import Fetcher
from kwire.consumer.subscription import SubscriptionState
from kwire.errors import CorruptRecordError

PER_BATCH = 50


def _batches(n, base=0):
    out = []
    for i in range(n):
        recs = [(None, b"%010d" % j, None, 1000) for j in range(base + i * PER_BATCH, base + (i + 1) * PER_BATCH)]
        out.append(records.build_batch(recs, base + i * PER_BATCH))
    return out


def _raw_chunk(fetcher, tp, data, offset):
    req = SimpleNamespace(context={"node": 1, "offsets": {tp: offset}, "leader_epochs": {tp: 0},
                                   "id_to_name": {}})
    resp = {"error_code": 0, "session_id": 0, "responses": [
        {"topic": tp[0], "partitions": [{"partition_index": tp[1], "error_code": 0,
                                          "high_watermark": -1, "records": data}]}]}
    [chunk] = fetcher.on_response(req, resp, 0)
    return chunk


def test_a_damaged_chunk_goes_out_up_to_the_damage_and_the_chunks_queued_behind_it_are_dropped():
    tp = ("t", 0)
    first = _batches(4)
    bad = bytearray(first[2])
    bad[-5] ^= 0xFF                                   # batch 2 (offsets 100-149) fails its CRC
    first[2] = bytes(bad)
    subs = SubscriptionState("earliest")
    subs.assign_manual([tp])
    subs.seek(tp, 0)
    fetcher = Fetcher(subs, None, check_crcs=True)
    a = _raw_chunk(fetcher, tp, b"".join(first), 0)
    b = _raw_chunk(fetcher, tp, b"".join(_batches(2, base=4 * PER_BATCH)), 4 * PER_BATCH)
    assert a.fence == b.fence  # fetched one after the other, before anyone saw the damage

    errors: list = []
    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "check.crcs": True, "error_cb": errors.append})
    try:
        c._assigned[tp] = True
        c._fence[tp] = c._assign_fence[tp] = a.fence
        c._q.extend([a, b])
        got = []
        for _ in range(5):
            got += [r.offset for r in c.consume(1000, timeout=0.2)]
        # every record before the damage, then the error; the chunk fetched after the damaged
        # one (offsets 200-299) is stale: handing it out would skip 100-199
        assert got == list(range(2 * PER_BATCH))
        assert len(errors) == 1 and isinstance(errors[0], CorruptRecordError)
        assert errors[0].partitions == [tp]
        assert c._fence[tp] > a.fence
        # both raw chunks went back to the driver's budget
        assert a.done and b.done
    finally:
        c.close()
