"""The plumbing of kwire.confluent's AdminClient: its Admin, the worker thread that serves its
calls in order, and the futures keyed as confluent-kafka keys them."""
from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..admin import Admin as _KAdmin
from ..errors import ConfigError
from ._config import config_error, split_config
from ._types import KafkaException, to_kafka_error

_GROUP_ID_NOT_FOUND = 69

_K = TypeVar("_K")


def _timeout(t: float | None) -> float | None:
    return None if t is None or t < 0 else float(t)


class _AdminBase:
    """An Admin, one worker thread, and how calls become futures."""

    def __init__(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kconf, extra = split_config(conf, kwargs, "admin")
        kconf.pop("logger", None)
        for k in ("group.id", "enable.auto.commit"):
            kconf.pop(k, None)
        try:
            self._a = _KAdmin(kconf)
        except ConfigError as exc:
            raise config_error(exc) from None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kwire-admin")

    def _request_timeout(self, request_timeout: float | None,
                         operation_timeout: float | None) -> float:
        """librdkafka's rule: request_timeout, by default socket.timeout.ms; at least the
        operation_timeout the brokers are given."""
        t = _timeout(request_timeout)
        if t is None:
            t = float(self._a.config.socket_timeout_ms) / 1000
        return max(t, float(operation_timeout or 0))

    def _submit(self, fn: Callable[..., object], *args: Any) -> concurrent.futures.Future[Any]:
        return self._pool.submit(fn, *args)

    def _dispatch(self, futs: dict[_K, concurrent.futures.Future[Any]],
                  work: Callable[[], Mapping[_K, Any]]) -> dict[_K, concurrent.futures.Future[Any]]:
        """Run ``work() -> {key: result | exception}`` on the worker thread and complete
        ``futs`` (same keys) from it; an exception of ``work`` itself fails them all."""
        for f in futs.values():
            f.set_running_or_notify_cancel()

        def run() -> None:
            try:
                res = work()
            except BaseException as exc:
                for f in futs.values():
                    f.set_exception(KafkaException(to_kafka_error(exc)))
                return
            for k, f in futs.items():
                r = res.get(k)
                if isinstance(r, BaseException):
                    f.set_exception(r if isinstance(r, KafkaException) else KafkaException(to_kafka_error(r)))
                else:
                    f.set_result(r)
        self._submit(run)
        return futs
