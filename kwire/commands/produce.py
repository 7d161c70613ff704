"""``kwire produce``: records from stdin, one per line, to a topic.

::

    seq 100 | kwire produce -b localhost:9092 -t numbers
    printf 'user-1:hello\\nuser-2:world\\n' | kwire produce -b localhost:9092 -t greetings -k :
    kwire consume -b A -t orders --from-beginning --format json --idle-timeout 1 \\
        | kwire produce -b B -t orders-copy --format json

Text input (the default): each line, without its newline, is a value (bytes as they are);
with ``--key-delimiter D`` the part before the first D is the key.  JSON input: one object per
line with ``value`` (or ``payload``), ``key``, ``headers`` (an object, a list of ``{"key",
"value"}`` or of ``[key, value]``), ``partition`` and ``timestamp`` (or ``ts``), all optional;
``key_encoding`` / ``value_encoding`` (or ``payload_encoding``) "base64" mark base64 bytes --
so ``kwire consume --format json`` output produces the same records again (its ``topic``,
``offset`` and ``tstype`` are ignored).  A value that is not a string is produced as its JSON.

When stdin is done it waits (up to ``--timeout``) for every record to be acknowledged and
prints how many went to which partition; any that failed make the exit status 1.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from ..config import parse_config
from .common import (
    CommandError,
    ProtocolLog,
    UsageError,
    add_common,
    add_format,
    client_config,
    error_name,
    make_tracer,
    stderr_tty,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from ..errors import KwireError
    from ..producer import DeliveryReport, Producer

_POLL_EVERY = 1000
_UNKNOWN_TOPIC = 3
_JSON_FIELDS = {"key", "value", "payload", "headers", "partition", "timestamp", "ts", "key_encoding",
                "value_encoding", "payload_encoding", "topic", "offset", "tstype"}


def add_produce(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("examples:\n"
                "  seq 100 | kwire produce -b localhost:9092 -t numbers\n"
                "  printf 'k1:v1\\nk2:v2\\n' | kwire produce -b localhost:9092 -t t -k :\n"
                "  echo '{\"key\": \"k\", \"value\": \"v\", \"headers\": {\"h\": \"1\"}}' | "
                "kwire produce -b localhost:9092 -t t --format json\n")
    p.add_argument("-t", "--topic", required=True, help="the topic to write to")
    p.add_argument("-p", "--partition", type=int, metavar="P",
                   help="write every record to partition P (default: the partitioner decides)")
    p.add_argument("-k", "--key-delimiter", metavar="D",
                   help="text input: the part of a line before the first D is its key")
    p.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE",
                   help="a header on every record (repeatable)")
    add_format(p, help_text="the input: text lines (default) or JSON objects, one per line")
    add_common(p, timeout_help="connecting, and waiting for the last acknowledgements (default 10)")


class _Rec(TypedDict, total=False):
    """One record read from the input: produce()'s arguments."""
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    timestamp: int | None


def run_produce(args: argparse.Namespace) -> int:
    from ..producer import Producer

    if args.key_delimiter is not None and (args.format == "json" or args.key_delimiter == ""):
        raise UsageError("--key-delimiter takes a non-empty delimiter and goes with text input")
    headers: list[tuple[str, bytes | None]] = []
    for item in args.header:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UsageError(f"--header takes KEY=VALUE, got {item!r}")
        headers.append((k, v.encode("utf-8")))
    conf = client_config(args, "producer", defaults={"allow.auto.create.topics": False})
    auto_create = parse_config(conf, role="producer").allow_auto_create_topics
    source = sys.stdin.buffer
    stats = _Stats()
    with ProtocolLog(conf):
        producer = Producer(conf, tracer=make_tracer(args))
        try:
            if not auto_create:
                _check_topic(producer, args)
            with _progress(enabled=not args.trace) as progress:
                for lineno, line in enumerate(source, 1):
                    if line.endswith(b"\n"):
                        line = line[:-1]
                    if args.format == "json":
                        if not line.strip():
                            continue
                        rec = _from_json(line, lineno)
                    else:
                        rec = _from_text(line, args.key_delimiter)
                    if headers:
                        rec["headers"] = headers + rec.get("headers", [])
                    if rec.get("partition") is None and args.partition is not None:
                        rec["partition"] = args.partition
                    _produce(producer, args.topic, rec, stats)
                    if stats.sent % _POLL_EVERY == 0:
                        producer.poll(0)
                        progress(stats.sent)
            left = producer.flush(args.timeout)
        finally:
            producer.close(0)
    print(stats.summary(args.topic))
    if left:
        raise CommandError(f"{left} of {stats.sent} records not acknowledged within {args.timeout:g} s")
    if stats.failed:
        raise CommandError(f"{stats.failed} of {stats.sent} records failed: {stats.first_error}")
    return 0


def _check_topic(producer: Producer, args: argparse.Namespace) -> None:
    snap = producer.list_topics(args.topic, timeout=args.timeout)
    info = snap.topics.get(args.topic)
    if info is None or (info.error_code == _UNKNOWN_TOPIC and not info.partitions):
        raise CommandError(f"unknown topic {args.topic!r} (create it with kwire topics --create, "
                           "or allow it with -X allow.auto.create.topics=true)")
    if info.error_code and not info.partitions:
        raise CommandError(f"topic {args.topic!r}: {error_name(info.error_code)}")
    if args.partition is not None and args.partition not in info.partitions:
        raise CommandError(f"topic {args.topic!r} has no partition {args.partition} "
                           f"(it has {len(info.partitions)})")


class _Stats:
    def __init__(self) -> None:
        self.sent = 0
        self.delivered = 0
        self.failed = 0
        self.first_error: KwireError | None = None
        self.by_partition: dict[int, int] = {}

    def on_delivery(self, err: KwireError | None, msg: DeliveryReport) -> None:
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = err
            return
        self.delivered += 1
        p = msg.partition()
        self.by_partition[p] = self.by_partition.get(p, 0) + 1

    def summary(self, topic: str) -> str:
        parts = ", ".join(f"{p}: {n}" for p, n in sorted(self.by_partition.items()))
        text = f"produced {self.delivered} record{'s' if self.delivered != 1 else ''} to {topic}"
        return text + (f" (partition {parts})" if parts else "")


def _produce(producer: Producer, topic: str, rec: _Rec, stats: _Stats) -> None:
    while True:
        try:
            producer.produce(topic, rec.get("value"), key=rec.get("key"), partition=rec.get("partition"),
                             timestamp=rec.get("timestamp"), headers=rec.get("headers") or None,
                             on_delivery=stats.on_delivery)
            break
        except BufferError:  # the producer's queue is full: let it send
            producer.poll(0.1)
    stats.sent += 1


def _from_text(line: bytes, delimiter: str | None) -> _Rec:
    if delimiter is None:
        return {"value": line}
    key, sep, value = line.partition(delimiter.encode("utf-8"))
    return {"key": key, "value": value} if sep else {"value": line}


def _from_json(line: bytes, lineno: int) -> _Rec:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise CommandError(f"line {lineno}: not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CommandError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - _JSON_FIELDS)
    if unknown:
        raise CommandError(f"line {lineno}: unknown field(s) {', '.join(unknown)}")
    try:
        rec: _Rec = {"value": _bytes(obj.get("value", obj.get("payload")),
                               obj.get("value_encoding", obj.get("payload_encoding"))),
               "key": _bytes(obj.get("key"), obj.get("key_encoding")),
               "headers": _headers(obj.get("headers"))}
        partition = obj.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise ValueError("partition must be an integer")
        rec["partition"] = partition
        ts = obj.get("timestamp", obj.get("ts"))
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
            raise ValueError("timestamp must be an integer (epoch milliseconds)")
        rec["timestamp"] = ts if ts is not None and ts >= 0 else None
    except (ValueError, TypeError, binascii.Error) as exc:
        raise CommandError(f"line {lineno}: {exc}") from None
    return rec


def _bytes(value: object, encoding: object) -> bytes | None:
    if encoding not in (None, "utf-8", "base64"):
        raise ValueError(f"unknown encoding {encoding!r} (expected base64)")
    if value is None:
        return None
    if isinstance(value, str):
        return base64.b64decode(value, validate=True) if encoding == "base64" else value.encode("utf-8")
    if encoding == "base64":
        raise ValueError("a base64 value must be a string")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _headers(value: object) -> list[tuple[str, bytes | None]]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [(str(k), _bytes(v, None)) for k, v in value.items()]
    if not isinstance(value, list):
        raise ValueError("headers must be an object or a list")
    out: list[tuple[str, bytes | None]] = []
    for h in value:
        if isinstance(h, dict):
            out.append((str(h["key"]), _bytes(h.get("value"), h.get("value_encoding"))))
        elif isinstance(h, list) and len(h) == 2:
            out.append((str(h[0]), _bytes(h[1], None)))
        else:
            raise ValueError("a header is {\"key\": ..., \"value\": ...} or [key, value]")
    return out


class _progress:
    """A live count on stderr while producing, when stderr is a terminal (and not tracing)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def __enter__(self) -> Callable[[int], None]:
        self._bar: Progress | None = None
        if self.enabled and stderr_tty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn

            self._bar = Progress(SpinnerColumn(), TextColumn("producing: {task.completed:,} records"),
                                 console=Console(stderr=True), transient=True)
            self._bar.__enter__()
            self._task: TaskID = self._bar.add_task("produce", total=None)
        return self._update

    def _update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=n)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

