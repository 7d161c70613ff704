"""The plumbing of kwire.confluent's Consumer: its kwire Consumer, the state the adapter keeps
beside it, the batch of records poll() took from kwire and hands out one by one (kept out of
kwire's view of what the application has), and how arguments and exceptions cross the edge."""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from ..consumer.consumer import Consumer as _KConsumer
from ..errors import ConfigError, KwireError
from . import _types
from ._config import config_error, forward_logs, split_config
from ._types import (
    KafkaError,
    KafkaException,
    TopicPartition,
    _tps,
    to_kafka_error,
    to_kafka_exception,
)

log = logging.getLogger("kwire.confluent")

_T = TypeVar("_T")
_Key = tuple[str, int]  # (topic, partition)


def _ck_timeout(timeout: object) -> float | None:
    """confluent-kafka: None or -1 wait forever."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError("timeout must be a number")
    return None if timeout < 0 else timeout


def _in(partitions: object) -> list[TopicPartition]:
    if not isinstance(partitions, (list, tuple)):
        raise TypeError("expected list of TopicPartition")
    out: list[TopicPartition] = []
    for p in partitions:
        if not isinstance(p, TopicPartition):
            raise TypeError("expected list of TopicPartition")
        out.append(p)
    return out


class _RecordView:
    """What kwire's commit()/store_offsets() read from a message (attributes, not methods)."""

    __slots__ = ("topic", "partition", "offset", "leader_epoch")

    def __init__(self, m: object) -> None:
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


class _ConsumerBase:
    """A kwire Consumer and what the adapter keeps beside it; the batch poll() holds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > 1:
            raise TypeError("expected configuration dict")
        conf = args[0] if args else None
        kconf, extra = split_config(conf, kwargs, "consumer")
        if not kconf.get("group.id"):
            raise ValueError("Failed to create consumer: group.id must be set")
        self._error_cb: Callable[[KafkaError | None], object] | None = extra.get("error_cb")
        self._no_brokers: bool = extra.get("_no_brokers", False)
        user_on_commit = extra.get("on_commit")
        if self._error_cb is not None:
            kconf["error_cb"] = self._on_error
        if user_on_commit is not None:
            kconf["on_commit"] = lambda err, parts: user_on_commit(to_kafka_error(err), _tps(parts))
        kconf.pop("logger", None)
        self._logger: logging.Logger | None = extra.get("logger")
        try:
            self._c = _KConsumer(kconf)
        except ConfigError as exc:
            raise config_error(exc) from None
        self._closed = False
        self._topics: list[str] = []
        # manual assignment as the application made it: kwire's own view follows once its
        # driver has applied it, confluent-kafka's assignment() reflects assign() at once
        self._manual: dict[_Key, None] | None = None
        self._reported_missing: set[str] = set()
        self._next_check = 0.0
        self._all_down = False
        self._buf: list[Any] | None = None  # records poll() took from kwire and hands out one by one
        self._bi = 0
        self._batch = 1
        self._handed_at = 0.0
        if self._logger is not None:
            self._log_handler = forward_logs(self._logger, extra.get("log_level"))

    # --- the batch poll() holds: kept out of kwire's view of what the application has ----------

    def _held(self) -> dict[_Key, Any]:
        """(topic, partition) -> the first record poll() holds and has not handed out."""
        out: dict[_Key, Any] = {}
        buf = self._buf
        if buf is not None:
            for r in buf[self._bi:]:
                key = (r.topic, r.partition)
                if key not in out:
                    out[key] = r
        return out

    def _unread(self, tps: Collection[_Key] | None = None) -> None:
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

    def _drop(self, tps: Collection[_Key] | None = None) -> None:
        """Forget the held records of ``tps`` (None: all)."""
        buf = self._buf
        if buf is None:
            return
        if tps is None:
            self._buf = None
            return
        rest = [r for r in buf[self._bi:] if (r.topic, r.partition) not in tps]
        self._buf, self._bi = (rest, 0) if rest else (None, 0)

    def _with_held(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """kwire's positions, corrected for records poll() holds."""
        held = self._held()
        for tp in tps:
            r = held.get((tp.topic, tp.partition))
            if r is not None:
                tp.offset = r.offset
                object.__setattr__(tp, "leader_epoch", r.leader_epoch if r.leader_epoch >= 0 else None)
        return tps

    def _on_error(self, exc: BaseException | None) -> None:
        err = to_kafka_error(exc)
        if self._error_cb is not None:
            self._error_cb(err)
        else:
            log.warning("consumer error: %s", err)

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return fn(*args)
        except KwireError as exc:
            raise to_kafka_exception(exc) from None
