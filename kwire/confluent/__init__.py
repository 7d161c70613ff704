"""confluent-kafka's API over kwire: ``import kwire.confluent as confluent_kafka``.

A thin adapter: ``Consumer`` / ``Producer`` / ``admin.AdminClient`` wrap one kwire Consumer,
Producer or Admin each and convert at the edges (records to :class:`Message`, kwire's errors to
:class:`KafkaError` / :class:`KafkaException`, callbacks to confluent's signatures).  Nothing of
it runs unless imported; kwire's own API is unchanged.

What differs from confluent-kafka, and why:

* ``KafkaError`` is a real exception class (a subclass of ``KafkaException`` whose ``args[0]``
  is itself); confluent-kafka's is an object the C extension can raise.
* The Producer's default partitioner is librdkafka's consistent_random (kwire's own Producer
  defaults to Java's murmur2_random): keys land where confluent-kafka puts them.
* Keys that tune only librdkafka internals are accepted and ignored (``_config.NO_OPS`` lists
  them with the reason).  ``group.protocol=consumer`` is KIP-848.
* ``stats_cb`` gets librdkafka's statistics JSON with the commonly graphed fields (see ``kwire.stats``).
* Transactions (``init_transactions`` ... ``send_offsets_to_transaction``,
  ``consumer_group_metadata()``) map kwire's typed errors to librdkafka's codes and flags.
* Not provided: the schema registry and its serializers, ``ShareConsumer``, and the admin
  operations kwire's Admin lacks (ACLs, ...: they raise ``_NOT_IMPLEMENTED``).
"""
from __future__ import annotations

from typing import Any

from .. import __version__ as _kwire_version
from ._admin_types import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    IsolationLevel,
    Node,
    TopicCollection,
    TopicPartitionInfo,
    Uuid,
)
from ._serializing import DeserializingConsumer, SerializingProducer
from ._types import MESSAGE_IMPLEMENTATION as MESSAGE_IMPLEMENTATION  # kwire's: not in __all__
from ._types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from .consumer import Consumer
from .producer import Producer

__all__ = ["Consumer", "Producer", "DeserializingConsumer", "SerializingProducer", "Message", "KafkaError", "KafkaException", "TopicPartition",
           "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_STORED", "OFFSET_INVALID",
           "TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME",
           "ThrottleEvent", "version", "libversion", "admin", "murmur2", "consistent", "fnv1a",
           "Node", "ConsumerGroupTopicPartitions", "ConsumerGroupState", "ConsumerGroupType",
           "IsolationLevel", "TopicCollection", "TopicPartitionInfo", "Uuid"]


__version__ = _kwire_version


class ThrottleEvent:
    """What confluent-kafka's throttle_cb receives.  kwire honours broker throttling but does
    not report it (throttle_cb is accepted and never called); the class exists for programs
    that import or construct it."""

    def __init__(self, broker_name: str, broker_id: int, throttle_time: float):
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.throttle_time = throttle_time

    def __str__(self) -> str:
        return f"{self.broker_name}/{self.broker_id} throttled for {int(self.throttle_time * 1000)} ms"


def _partition(name: str, key: object, partition_count: object) -> int:
    if not isinstance(key, bytes):
        raise TypeError("key must be bytes")
    if isinstance(partition_count, bool) or not isinstance(partition_count, int):
        raise TypeError("partition_count must be an int")
    if partition_count <= 0:
        raise ValueError("partition_count must be > 0")
    from ..producer import partition_for
    p = partition_for(name, key, partition_count)
    assert p is not None  # a key and a partitioner that is not random: a partition
    return p


def murmur2(key: bytes, partition_count: int) -> int:
    """The partition librdkafka's (and Java's) murmur2 partitioner picks for ``key``."""
    return _partition("murmur2", key, partition_count)


def consistent(key: bytes, partition_count: int) -> int:
    """The partition librdkafka's consistent (CRC32) partitioner picks for ``key``."""
    return _partition("consistent", key, partition_count)


def fnv1a(key: bytes, partition_count: int) -> int:
    """The partition librdkafka's fnv1a partitioner picks for ``key``."""
    return _partition("fnv1a", key, partition_count)


def _version_int(v: str) -> int:
    parts = [int(p) for p in v.split(".")[:3]] + [0, 0, 0]
    return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | 0xff


def version() -> tuple[str, int]:
    """(kwire's version string, as an int 0xMMmmrrxx), in the shape of confluent-kafka's."""
    return (_kwire_version, _version_int(_kwire_version))


# The librdkafka release whose client behaviour the adapter follows (confluent-kafka 2.16.1
# bundles it); programs gate features on libversion()[1], so it is reported as the number.
_FOLLOWS_LIBRDKAFKA = "2.16.0"


def libversion() -> tuple[str, int]:
    """There is no librdkafka: ``("kwire-<version> (librdkafka 2.16.0 API)", 0x021000ff)`` --
    the number is the librdkafka release whose behaviour the adapter follows, so that version
    checks in programs pass; the string says it is kwire."""
    return (f"kwire-{_kwire_version} (librdkafka {_FOLLOWS_LIBRDKAFKA} API)",
            _version_int(_FOLLOWS_LIBRDKAFKA))


def __getattr__(name: str) -> Any:
    if name == "admin":
        # (not ``from . import admin``: that asks this function for ``admin`` again, forever)
        import importlib
        return importlib.import_module(f"{__name__}.admin")
    raise AttributeError(f"module 'kwire.confluent' has no attribute {name!r}")
