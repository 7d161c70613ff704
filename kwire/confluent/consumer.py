"""confluent-kafka's Consumer over :class:`kwire.Consumer`.

One kwire Consumer does the work; this class converts at the edges: records become
:class:`Message` wrappers (one small object per record, no field copied), kwire's events and
exceptions become error messages and KafkaExceptions, callbacks get confluent's types.
"""
from __future__ import annotations

import logging
import re
import time
from time import monotonic_ns as _monotonic_ns

from ..consumer import Consumer as _KConsumer
from ..consumer.consumer import PartitionEOF as _EOF
from ..errors import ConfigError, KwireError
from ..net.connection import ConnState
from . import _types
from ._config import config_error, split_config
from ._types import (
    KafkaError,
    KafkaException,
    TopicPartition,
    _event,
    _tps,
    _wrap,
    _wrap_list,
    to_kafka_error,
    to_kafka_exception,
)

log = logging.getLogger("kwire.confluent")

_PARTITION_TEXT = re.compile(r"^(.+) \[(\d+)\](?: offset (-?\d+))?$")
_CHECK_EVERY_S = 1.0
_MAX_BATCH = 500  # records poll() takes from kwire at most at once  # unknown topics / all brokers down are looked for at most this often


def _ck_timeout(timeout):
    """confluent-kafka: None or -1 wait forever."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError("timeout must be a number")
    return None if timeout < 0 else timeout


class Consumer:
    """confluent-kafka's ``Consumer(conf)`` (or ``Consumer(**conf)``) over kwire.

    ``poll()`` returns a :class:`Message` or None; error messages (``msg.error()`` not None)
    carry ``_PARTITION_EOF`` (with ``enable.partition.eof``), ``UNKNOWN_TOPIC_OR_PART`` for a
    subscribed topic the cluster does not have, and consumer errors kwire raises.  Every method
    raises ``RuntimeError("Consumer closed")`` after close().
    """

    def __init__(self, *args, **kwargs):
        if len(args) > 1:
            raise TypeError("expected configuration dict")
        conf = args[0] if args else None
        kconf, extra = split_config(conf, kwargs, "consumer")
        if not kconf.get("group.id"):
            raise ValueError("Failed to create consumer: group.id must be set")
        self._error_cb = extra.get("error_cb")
        self._no_brokers = extra.get("_no_brokers", False)
        user_on_commit = extra.get("on_commit")
        if self._error_cb is not None:
            kconf["error_cb"] = self._on_error
        if user_on_commit is not None:
            kconf["on_commit"] = lambda err, parts: user_on_commit(to_kafka_error(err), _tps(parts))
        kconf.pop("logger", None)
        self._logger = extra.get("logger")
        try:
            self._c = _KConsumer(kconf)
        except ConfigError as exc:
            raise config_error(exc) from None
        self._closed = False
        self._topics: list = []
        # manual assignment as the application made it: kwire's own view follows once its
        # driver has applied it, confluent-kafka's assignment() reflects assign() at once
        self._manual: dict | None = None
        self._reported_missing: set = set()
        self._next_check = 0.0
        self._all_down = False
        self._on_assign = self._on_revoke = self._on_lost = None
        self._buf: list | None = None  # records poll() took from kwire and hands out one by one
        self._bi = 0
        self._batch = 1
        self._handed_at = 0.0
        if self._logger is not None:
            self._log_handler = _forward_logs(self._logger, extra.get("log_level"))

    # --- records ------------------------------------------------------------------------------

    def poll(self, timeout=None):
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
                m = self.poll(1.0)
                if m is not None:
                    return m
        recs = self._refill(1_000_000_000, timeout, adaptive=True)
        if type(recs) is not list:
            return recs  # an error/event Message, or None
        if len(recs) > 1:
            self._buf = recs
            self._bi = 1
        return _wrap(recs[0])

    def consume(self, num_messages=1, timeout=-1):
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

    def _refill(self, limit, timeout, adaptive=False):
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
            return self._error_message(exc)
        self._handed_at = time.monotonic()
        if not recs:
            return self._idle()
        if type(recs[0]) is _EOF:
            return self._eof(recs[0])
        return recs

    # --- the batch poll() holds: kept out of kwire's view of what the application has ----------

    def _held(self) -> dict:
        """(topic, partition) -> the first record poll() holds and has not handed out."""
        out: dict = {}
        buf = self._buf
        if buf is not None:
            for r in buf[self._bi:]:
                key = (r.topic, r.partition)
                if key not in out:
                    out[key] = r
        return out

    def _unread(self, tps=None) -> None:
        """Give back the held records of ``tps`` (None: all): kwire's positions of what the
        application has move back to the first of them, so that commits, pause() (which
        fetches again from there) and close() count only what the application had."""
        held = self._held()
        if not held:
            return
        pos = self._c._pos
        for key, r in held.items():
            if tps is not None and key not in tps:
                continue
            prev = pos.get(key)
            epoch = r.leader_epoch if r.leader_epoch >= 0 else None
            pos[key] = (r.offset, epoch, prev[2] if prev is not None else 0)
            self._c._dirty.add(key)
        self._drop(tps)

    def _drop(self, tps=None) -> None:
        """Forget the held records of ``tps`` (None: all)."""
        buf = self._buf
        if buf is None:
            return
        if tps is None:
            self._buf = None
            return
        rest = [r for r in buf[self._bi:] if (r.topic, r.partition) not in tps]
        self._buf, self._bi = (rest, 0) if rest else (None, 0)

    def _with_held(self, tps: list) -> list:
        """kwire's positions, corrected for records poll() holds."""
        held = self._held()
        for tp in tps:
            r = held.get((tp.topic, tp.partition))
            if r is not None:
                tp.offset = r.offset
                object.__setattr__(tp, "leader_epoch", r.leader_epoch if r.leader_epoch >= 0 else None)
        return tps

    def _eof(self, e):
        return _event(e.topic, e.partition, e.offset, KafkaError(
            KafkaError._PARTITION_EOF,
            f"Fetch from broker reached end of partition at offset {e.offset} "
            f"(HighwaterMark {e.offset})"))

    def _error_message(self, exc: BaseException):
        """An error message for an exception kwire raised from poll()/consume()."""
        err = to_kafka_error(exc)
        parts = getattr(exc, "partitions", None) or []
        topic = partition = offset = None
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

    def _idle(self):
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

    def _on_error(self, err) -> None:
        err = to_kafka_error(err)
        if self._error_cb is not None:
            self._error_cb(err)
        else:
            log.warning("consumer error: %s", err)

    # --- group and assignment ---------------------------------------------------------------

    def _wrap_cb(self, cb):
        if cb is None:
            return None
        return lambda _c, parts: cb(self, [TopicPartition(p.topic, p.partition) for p in parts])

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None):
        self._check()
        if not isinstance(topics, list):
            raise TypeError("expected list of topic unicode strings")
        for cb in (on_assign, on_revoke, on_lost):
            if cb is not None and not callable(cb):
                raise TypeError("expected callable")
        self._topics = list(topics)
        self._manual = None
        self._reported_missing.clear()
        self._next_check = 0.0
        try:
            self._c.subscribe(topics, on_assign=self._wrap_cb(on_assign),
                              on_revoke=self._wrap_cb(on_revoke), on_lost=self._wrap_cb(on_lost))
        except KwireError as exc:
            raise to_kafka_exception(exc) from None

    def unsubscribe(self):
        self._check()
        self._topics = []
        self._manual = None
        self._unread()
        self._call(self._c.unsubscribe)

    def assign(self, partitions):
        self._check()
        parts = _in(partitions)
        self._unread()
        self._call(self._c.assign, parts)
        if not self._topics:
            self._manual = {(p.topic, p.partition): None for p in parts}

    def incremental_assign(self, partitions):
        self._check()
        parts = _in(partitions)
        self._call(self._c.incremental_assign, parts)
        if not self._topics:
            self._manual = dict(self._manual or {})
            self._manual.update({(p.topic, p.partition): None for p in parts})

    def unassign(self):
        self._check()
        self._unread()
        self._call(self._c.unassign)
        self._manual = None if self._topics else {}

    def incremental_unassign(self, partitions):
        self._check()
        parts = _in(partitions)
        self._unread({(p.topic, p.partition) for p in parts})
        self._call(self._c.incremental_unassign, parts)
        if self._manual is not None:
            for p in parts:
                self._manual.pop((p.topic, p.partition), None)

    def assignment(self):
        self._check()
        if self._manual is not None:
            return [TopicPartition(t, p) for t, p in self._manual]
        return _tps(self._c.assignment())

    # --- offsets ----------------------------------------------------------------------------------

    def commit(self, message=None, offsets=None, asynchronous=True, **kwargs):
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

    def store_offsets(self, message=None, offsets=None):
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

    def committed(self, partitions, timeout=None):
        self._check()
        return _tps(self._call(self._c.committed, _in(partitions), _ck_timeout(timeout)))

    def position(self, partitions):
        self._check()
        return self._with_held(_tps(self._call(self._c.position, _in(partitions))))

    def seek(self, partition):
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

    def pause(self, partitions):
        self._check()
        parts = _in(partitions)
        self._unread({(p.topic, p.partition) for p in parts})
        self._call(self._c.pause, parts)

    def resume(self, partitions):
        self._check()
        self._call(self._c.resume, _in(partitions))

    def get_watermark_offsets(self, partition, timeout=None, cached=False):
        self._check()
        if not isinstance(partition, TopicPartition):
            raise TypeError("expected TopicPartition")
        return self._call(self._c.get_watermark_offsets, partition, _ck_timeout(timeout), cached)

    def offsets_for_times(self, partitions, timeout=None):
        self._check()
        return _tps(self._call(self._c.offsets_for_times, _in(partitions), _ck_timeout(timeout)))

    def list_topics(self, topic=None, timeout=-1):
        self._check()
        from .admin import _cluster_metadata
        return _cluster_metadata(self._call(self._c.list_topics, topic, _ck_timeout(timeout)))

    def memberid(self):
        self._check()
        return getattr(self._c._coord, "member_id", None) or None

    # --- lifecycle ----------------------------------------------------------------------------------

    def cluster_id(self, timeout=-1):
        """The cluster id the brokers report (None when they report none)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        md = self._c._net.metadata
        if md.cluster_id is None:
            try:
                return self._c.list_topics(None, _ck_timeout(timeout)).cluster_id
            except KwireError as exc:
                raise to_kafka_exception(exc) from None
        return md.cluster_id

    def set_sasl_credentials(self, username, password):
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                        "kwire takes SASL credentials from the configuration only"))

    def consumer_group_metadata(self):
        """The group membership for Producer.send_offsets_to_transaction() (kwire's
        :class:`~kwire.consumer.GroupMetadata`; confluent-kafka's is opaque)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        try:
            return self._c.consumer_group_metadata()
        except KwireError as exc:
            raise to_kafka_exception(exc) from None

    def close(self):
        """Revoke (on_revoke), commit (auto commit), leave the group, stop.  Closing again does
        nothing (as confluent-kafka 2.x)."""
        if self._closed:
            return None
        self._closed = True
        self._unread()
        try:
            self._c.close()
        finally:
            if self._logger is not None:
                logging.getLogger("kwire").removeHandler(self._log_handler)
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._closed:
            self.close()
        return False

    def _check(self):
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except KwireError as exc:
            raise to_kafka_exception(exc) from None


class _RecordView:
    """What kwire's commit()/store_offsets() read from a message (attributes, not methods)."""

    __slots__ = ("topic", "partition", "offset", "leader_epoch")

    def __init__(self, m):
        if not isinstance(m, (_types.Message, _types.PyMessage)):
            raise TypeError("expected Message object")
        if m.error() is not None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            "Cannot commit offsets for an error message"))
        self.topic = m.topic()
        self.partition = m.partition()
        self.offset = m.offset()
        le = m.leader_epoch()
        self.leader_epoch = -1 if le is None else le


def _in(partitions):
    if not isinstance(partitions, (list, tuple)):
        raise TypeError("expected list of TopicPartition")
    for p in partitions:
        if not isinstance(p, TopicPartition):
            raise TypeError("expected list of TopicPartition")
    return list(partitions)


_LOG_LEVELS = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR,
               4: logging.WARNING, 5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}


class _Forward(logging.Handler):
    def __init__(self, target: logging.Logger, level: int):
        super().__init__(level)
        self.target = target

    def emit(self, record):
        if self.target.isEnabledFor(record.levelno):
            self.target.handle(record)


def _forward_logs(logger, log_level) -> logging.Handler:
    """``logger``: kwire's log records (the 'kwire' logger tree) go to it, filtered by
    ``log_level`` (syslog numbering as librdkafka's, default 6 = info) while the client is open."""
    level = _LOG_LEVELS.get(int(log_level) if log_level is not None else 6, logging.INFO)
    h = _Forward(logger, level)
    root = logging.getLogger("kwire")
    root.addHandler(h)
    if root.getEffectiveLevel() > level:
        root.setLevel(level)
    return h
