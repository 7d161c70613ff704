"""What the producer queues: a record on its way (:class:`DeliveryReport`, which the delivery
callback receives) and a batch of them for one partition."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import KwireError

__all__ = ["DeliveryReport", "Batch", "TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME",
           "TIMESTAMP_LOG_APPEND_TIME", "BATCH_OVERHEAD_BYTES"]

# confluent-kafka's timestamp types
TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

BATCH_OVERHEAD_BYTES = 61


class DeliveryReport:
    """What a delivery callback receives (confluent-kafka's Message methods)."""

    __slots__ = ("_topic", "_partition", "_key", "_value", "_headers", "_timestamp_ms",
                 "_timestamp_type", "_create_ms", "_offset", "_error", "_on_delivery", "_created_ms",
                 "_delivered_ms", "_size")

    def __init__(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]] | None, timestamp_ms: int,
                 on_delivery: Callable[..., Any] | None, created_ms: int, size: int) -> None:
        self._topic = topic
        self._partition = partition
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp_ms = timestamp_ms
        self._create_ms = timestamp_ms  # what the record carries, whatever the broker reports
        self._timestamp_type = TIMESTAMP_CREATE_TIME
        self._offset = -1001  # OFFSET_INVALID until acknowledged
        self._error: KwireError | None = None
        self._on_delivery = on_delivery
        self._created_ms = created_ms
        self._delivered_ms: int | None = None
        self._size = size

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return -1 if self._partition is None else self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers or None

    def timestamp(self) -> tuple[int, int]:
        """``(TIMESTAMP_CREATE_TIME, ms)``, or ``(TIMESTAMP_LOG_APPEND_TIME, ms)`` when the broker
        reported a log-append time in its Produce response."""
        return (self._timestamp_type, self._timestamp_ms)

    def create_timestamp(self) -> int:
        """The timestamp written into the record (ms)."""
        return self._create_ms

    def error(self) -> KwireError | None:
        return self._error

    def latency(self) -> float | None:
        """Seconds from produce() to acknowledgement."""
        if self._delivered_ms is None:
            return None
        return (self._delivered_ms - self._created_ms) / 1000.0

    def __len__(self) -> int:
        return len(self._value or b"")

    def __repr__(self) -> str:
        return (f"<DeliveryReport {self._topic}[{self.partition()}]@{self._offset}"
                f"{' error=' + repr(self._error) if self._error else ''}>")


class Batch:
    __slots__ = ("tp", "msgs", "size_bytes", "created_ms", "closed", "payload", "attempts",
                 "next_attempt_ms", "stale_metadata_ms", "purged", "identity")

    def __init__(self, tp: tuple[str, int], now: int):
        self.tp = tp
        self.msgs: list[DeliveryReport] = []
        self.size_bytes = BATCH_OVERHEAD_BYTES
        self.created_ms = now
        self.closed = False
        self.payload: bytes | None = None
        self.attempts = 0
        self.next_attempt_ms = 0
        # after NOT_LEADER & co: the metadata's updated_ms then; the retry waits for newer
        self.stale_metadata_ms = -1
        self.purged = False  # reported by purge() while in flight: its answer is ignored
        self.identity: tuple[int, int] | None = None  # idempotence: (producer id, epoch) of payload
