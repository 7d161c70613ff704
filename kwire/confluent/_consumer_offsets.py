"""kwire.confluent Consumer's offset calls: commit and store offsets, committed offsets,
positions, seek, watermarks and offsets for times (positions corrected for the records poll()
holds)."""
from __future__ import annotations

from typing import Any

from ..errors import KwireError
from ._consumer_base import _ck_timeout, _ConsumerBase, _in, _RecordView
from ._types import KafkaError, KafkaException, TopicPartition, _tps, to_kafka_exception


class _OffsetCalls(_ConsumerBase):
    """The offset calls of :class:`~kwire.confluent.consumer.Consumer`."""

    def commit(self, message: Any = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True, **kwargs: Any) -> list[TopicPartition] | None:
        """Commit the position after ``message``, ``offsets``, or every consumed position.
        Synchronous: returns the committed TopicPartitions or raises KafkaException."""
        self._check()
        if "async" in kwargs:  # confluent-kafka's spelling before Python 3.7
            asynchronous = kwargs.pop("async")
        if kwargs:
            raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
        if message is not None and offsets is not None:
            raise ValueError("Commit takes either message or offsets, not both")
        rec = None
        if message is not None:
            rec = _RecordView(message)
        elif offsets is None and self._buf is not None and self._c._auto_store:
            # poll() holds records kwire counts as the application's: commit what it had (with
            # enable.auto.offset.store=false kwire commits what store_offsets() stored instead)
            # (kwire's own commit() takes the positions after the records it returned: _pos)
            assigned = self._c._assigned
            offsets = self._with_held([TopicPartition(t, p, off, None, -1 if ep is None else ep)
                                       for (t, p), (off, ep, _f) in list(self._c._pos.items())
                                       if (t, p) in assigned])
            offsets = [tp for tp in offsets if tp.offset >= 0]
        try:
            res = self._c.commit(message=rec, offsets=None if offsets is None else _in(offsets),
                                 asynchronous=asynchronous)
        except KwireError as exc:
            if str(exc) == "no offsets to commit":
                raise KafkaException(KafkaError(KafkaError._NO_OFFSET)) from None
            raise to_kafka_exception(exc) from None
        if asynchronous:
            return None
        return _tps(res) if res is not None else None

    def store_offsets(self, message: Any = None,
                      offsets: list[TopicPartition] | None = None) -> None:
        self._check()
        if message is not None and offsets is not None:
            raise ValueError("Store offsets takes either message or offsets, not both")
        try:
            if message is not None:
                self._c.store_offsets(message=_RecordView(message))
            else:
                self._c.store_offsets(offsets=None if offsets is None else _in(offsets))
        except ValueError:
            raise
        except KwireError as exc:
            if "is not assigned" in str(exc):
                raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, str(exc))) from None
            raise to_kafka_exception(exc) from None

    def committed(self, partitions: list[TopicPartition],
                  timeout: float | None = None) -> list[TopicPartition]:
        self._check()
        return _tps(self._call(self._c.committed, _in(partitions), _ck_timeout(timeout)))

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._check()
        return self._with_held(_tps(self._call(self._c.position, _in(partitions))))

    def seek(self, partition: TopicPartition) -> None:
        self._check()
        if not isinstance(partition, TopicPartition):
            raise TypeError("expected TopicPartition")
        self._drop({(partition.topic, partition.partition)})
        try:
            self._c.seek(partition)
        except KwireError as exc:
            if "is not assigned" in str(exc):  # not (yet) fetched: librdkafka says the same
                raise KafkaException(KafkaError(KafkaError._STATE, f"Local: Erroneous state ({exc})")) from None
            raise to_kafka_exception(exc) from None

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int] | None:
        self._check()
        if not isinstance(partition, TopicPartition):
            raise TypeError("expected TopicPartition")
        return self._call(self._c.get_watermark_offsets, partition, _ck_timeout(timeout), cached)

    def offsets_for_times(self, partitions: list[TopicPartition],
                          timeout: float | None = None) -> list[TopicPartition]:
        self._check()
        return _tps(self._call(self._c.offsets_for_times, _in(partitions), _ck_timeout(timeout)))
