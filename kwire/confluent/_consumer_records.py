"""kwire.confluent Consumer's poll() and consume(): records from kwire in batches, as Message
wrappers (one small object per record, no field copied), and kwire's events and exceptions as
error messages (partition EOF, unknown topics, consumer errors)."""
from __future__ import annotations

import re
import time
from time import monotonic_ns as _monotonic_ns
from typing import Any

from ..consumer.consumer import PartitionEOF as _EOF
from ..errors import KwireError
from ..net.connection import ConnState
from ._consumer_base import _ck_timeout, _ConsumerBase
from ._types import KafkaError, _event, _wrap, _wrap_list, to_kafka_error

_PARTITION_TEXT = re.compile(r"^(.+) \[(\d+)\](?: offset (-?\d+))?$")
_CHECK_EVERY_S = 1.0  # unknown topics / all brokers down are looked for at most this often
_MAX_BATCH = 500  # records poll() takes from kwire at most at once


def _eof_message(e: _EOF) -> Any:
    return _event(e.topic, e.partition, e.offset, KafkaError(
        KafkaError._PARTITION_EOF,
        f"Fetch from broker reached end of partition at offset {e.offset} "
        f"(HighwaterMark {e.offset})"))


def _error_message(exc: BaseException) -> Any:
    """An error message for an exception kwire raised from poll()/consume()."""
    err = to_kafka_error(exc)
    parts = getattr(exc, "partitions", None) or []
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    if parts:
        topic, partition = parts[0] if isinstance(parts[0], tuple) else (parts[0].topic, parts[0].partition)
    else:
        # kwire's fetch errors name the partition in their text: "topic [p] offset n"
        m = _PARTITION_TEXT.match(getattr(exc, "broker_message", None) or "")
        if m:
            topic, partition, offset = m.group(1), int(m.group(2)), int(m.group(3) or -1)
    if err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
        # auto.offset.reset=error: librdkafka reports that nothing could be reset to
        err = KafkaError(KafkaError._AUTO_OFFSET_RESET,
                         f"Fetch position offset {offset} is out of range for "
                         f"{topic} [{partition}], and auto.offset.reset=error")
    return _event(topic, partition, offset, err)


class _RecordCalls(_ConsumerBase):
    """poll() and consume() of :class:`~kwire.confluent.consumer.Consumer`."""

    def poll(self, timeout: float | None = None) -> Any:
        """The next Message (or error/event Message), or None after ``timeout`` seconds (None or
        -1: wait until there is one)."""
        # The record path: a message from the batch in hand, or one call into kwire for the
        # next batch (see _refill).
        buf = self._buf
        if buf is not None:
            i = self._bi
            r = buf[i]
            i += 1
            if i == len(buf):
                self._buf = None
            else:
                self._bi = i
            # a poll() as far as max.poll.interval.ms goes, though kwire was not called
            self._c._ch.last_poll_ms = _monotonic_ns() // 1_000_000
            return _wrap(r)
        if self._closed:
            raise RuntimeError("Consumer closed")
        if timeout is None or timeout < 0:
            while True:  # in slices, so unknown topics / brokers down are reported meanwhile
                # this poll(), not a subclass's: DeserializingConsumer's would deserialize twice
                m = _RecordCalls.poll(self, 1.0)
                if m is not None:
                    return m
        recs = self._refill(1_000_000_000, timeout, adaptive=True)
        if type(recs) is not list:
            return recs  # an error/event Message, or None
        if len(recs) > 1:
            self._buf = recs
            self._bi = 1
        return _wrap(recs[0])

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        """Up to ``num_messages`` Messages: waits up to ``timeout`` seconds (-1 / None: until
        there is one) and returns what arrived."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        if isinstance(num_messages, bool) or not isinstance(num_messages, int):
            raise TypeError("num_messages must be an int")
        if num_messages < 0 or num_messages > 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")
        buf = self._buf
        if buf is not None:  # what poll() left of its batch comes first
            self._c._ch.last_poll_ms = _monotonic_ns() // 1_000_000
            i = self._bi
            j = i + num_messages
            if j >= len(buf):
                self._buf = None
                return _wrap_list(buf[i:] if i else buf)
            self._bi = j
            return _wrap_list(buf[i:j])
        t = _ck_timeout(timeout)
        deadline = None if t is None else time.monotonic() + t
        while True:
            left = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            recs = self._refill(num_messages, left)
            if type(recs) is list:
                return _wrap_list(recs)
            if recs is not None:
                return [recs]
            if num_messages == 0 or (deadline is not None and time.monotonic() >= deadline):
                return []

    def _refill(self, limit: int, timeout: float | None, adaptive: bool = False) -> object:
        """One call into kwire for up to ``limit`` records (poll(), ``adaptive``: up to
        ``self._batch``; consume(): up to ``num_messages``, as confluent-kafka gives): a
        non-empty list of Records, an error/event Message, or None.

        poll() takes records from kwire in batches and hands them out one by one: kwire counts
        a batch as consumed only when it is asked for the next one, i.e. after the application
        had every message of it (at-least-once holds).  The batch starts at one record and
        doubles while the application gets through batches in under 100 ms, up to 500, and
        shrinks when a batch takes the application over a second.  Every poll() still counts
        as one for max.poll.interval.ms (it stamps kwire's last-poll time), so a slow
        application is not taken for a stalled one."""
        if adaptive and limit > self._batch:
            took = time.monotonic() - self._handed_at  # the application's time for the last batch
            if took < 0.1:
                self._batch = min(self._batch * 2, _MAX_BATCH)
            elif took > 1.0 and self._batch > 1:
                self._batch = max(1, self._batch // 4)
            limit = self._batch
        try:
            recs = self._c.consume(limit, timeout)
        except KwireError as exc:
            return _error_message(exc)
        self._handed_at = time.monotonic()
        if not recs:
            return self._idle()
        if type(recs[0]) is _EOF:
            return _eof_message(recs[0])
        return recs

    def _idle(self) -> Any:
        """Between records: report subscribed topics the cluster lacks (as an error message, once
        per topic) and all brokers down (to error_cb), at most once a second."""
        now = time.monotonic()
        if now < self._next_check:
            return None
        self._next_check = now + _CHECK_EVERY_S
        self._check_brokers()
        md = self._c._md
        if self._topics:
            for t in self._topics:
                if t.startswith("^"):
                    continue
                info = md.topic(t)  # what the cluster last said of it (None: not asked yet)
                if info is None:
                    continue
                if info.error_code == KafkaError.UNKNOWN_TOPIC_OR_PART and not info.partitions:
                    if t not in self._reported_missing:
                        self._reported_missing.add(t)
                        return _event(t, None, None, KafkaError(
                            KafkaError.UNKNOWN_TOPIC_OR_PART,
                            f"Subscribed topic not available: {t}: Broker: Unknown topic or partition"))
                else:
                    self._reported_missing.discard(t)
        return None

    def _check_brokers(self) -> None:
        conns = list(self._c._net._conns.values())
        down = bool(conns) and all(c.state is ConnState.DISCONNECTED and c.failures > 0 for c in conns)
        if down and not self._all_down and not self._no_brokers:
            self._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN,
                                      f"{len(conns)}/{len(conns)} brokers are down"))
        self._all_down = down
