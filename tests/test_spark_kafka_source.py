"""kwire's reader against Spark's own Kafka source (``spark.read.format("kafka")``, the
spark-sql-kafka-0-10 jar matching pyspark, on the ``spark`` fixture's class path): the same
options over the same topic give the same rows, on Apache Kafka 4.3 and 3.9.

The topic is written by confluent-kafka (librdkafka), in batches of every compression codec, with
null keys and values, headers (one with a null value) and, for the read_committed case, an
aborted transaction between committed ones -- so both readers see control records and offset
gaps.  Spark's source reads through kafka-clients; kwire through its own codec: agreeing on
(partition, offset, key, value, headers, timestamp, timestamp type) is agreeing with the Java
client on every record.
"""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire.spark as ks

pytestmark = [pytest.mark.spark]

PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def create(peer, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": peer.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(10)
    from kwire.admin import Admin
    with Admin({"bootstrap.servers": peer.bootstrap}) as a:
        a.wait_for_topics([topic], timeout=10)


def record(i: int) -> tuple:
    key = None if i % 11 == 0 else b"key-%d" % (i % 7)
    value = None if i % 13 == 4 else b"value-%d-" % i + b"v" * (i % 50)
    headers = [("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else None
    return key, value, headers


def write_every_codec(peer, topic: str, per_codec: int = 40) -> int:
    """``per_codec`` records per compression codec, round robin over the partitions, one flush
    per codec (so each codec's records land in batches of their own)."""
    i = 0
    for codec in CODECS:
        p = Producer({"bootstrap.servers": peer.bootstrap, "compression.type": codec, "linger.ms": 5})
        for _ in range(per_codec):
            key, value, headers = record(i)
            p.produce(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS)
            i += 1
        assert p.flush(10) == 0
    return i


def rows(df) -> list[tuple]:
    return sorted((r.topic, r.partition, r.offset, r.key, r.value,
                   tuple((h.key, h.value) for h in r.headers) if r.headers else (),
                   r.timestamp, r.timestampType) for r in df.collect())


def spark_source(spark, peer, topic: str, **extra):
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", peer.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest").option("includeHeaders", "true"))
    for k, v in extra.items():
        reader = reader.option(k, v)
    return reader.load()


def kwire_source(spark, peer, topic: str, reader: str, **extra):
    return ks.read_kafka(spark, reader=reader, **{
        "kafka.bootstrap.servers": peer.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
        "endingOffsets": "latest", "includeHeaders": "true", **extra})


@pytest.mark.parametrize("reader", ["auto", "mapInArrow"])
def test_same_records_as_spark_kafka_source(spark, kafka_version, unique_topic, reader):
    peer = kafka_version
    create(peer, unique_topic)
    n = write_every_codec(peer, unique_topic)

    theirs = spark_source(spark, peer, unique_topic)
    ours = kwire_source(spark, peer, unique_topic, reader)
    assert ours.schema == theirs.schema
    expected = rows(theirs)
    assert len(expected) == n  # Spark's source read all of them: a real reference
    assert {(p, len([r for r in expected if r[1] == p])) for p in range(PARTITIONS)} == \
        {(p, n // PARTITIONS + (1 if p < n % PARTITIONS else 0)) for p in range(PARTITIONS)}
    assert rows(ours) == expected
    assert ours.count() == theirs.count() == n


def test_same_records_as_spark_kafka_source_with_an_aborted_transaction(spark, kafka, unique_topic):
    """Committed, aborted, committed: read_committed skips the aborted records and both
    readers step over the control records' offsets alike; read_uncommitted gives them all."""
    create(kafka, unique_topic)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}",
                  "compression.type": "zstd", "linger.ms": 5})
    p.init_transactions(10)
    i = 0
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for _ in range(30):
            key, value, headers = record(i)
            p.produce(unique_topic, key=key, value=value, headers=headers, partition=i % PARTITIONS)
            i += 1
        p.flush(10)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(10)

    for isolation, n in (("read_committed", 60), ("read_uncommitted", 90)):
        extra = {"kafka.isolation.level": isolation}
        expected = rows(spark_source(spark, kafka, unique_topic, **extra))
        assert len(expected) == n, isolation
        assert rows(kwire_source(spark, kafka, unique_topic, "auto", **extra)) == expected, isolation
