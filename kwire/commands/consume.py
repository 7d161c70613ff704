"""``kwire consume``: print a topic's records, as text for people or JSON lines for scripts.

::

    kwire consume -b localhost:9092 -t orders --from-beginning --count 10 --format json
    kwire consume -b localhost:9092 -t orders -p 0 --offset 1200 --idle-timeout 2
    kwire consume -b localhost:9092 -t orders --from-timestamp 1767225600000
    kwire consume -b localhost:9092 -t orders -g audit --from-beginning     # a group member; commits

Without ``--group`` the partitions are assigned directly (``-p``: only these) and nothing is
committed.  With ``--group`` the consumer subscribes, the group assigns partitions, and what
was printed is committed (automatically while running and once more at the end).  The start:
``--from-beginning`` / ``--from-end`` (for a group: only where it has no committed offset, as
``auto.offset.reset``), ``--offset N`` or ``--from-timestamp MS`` (the first record at or after
that time; for a group these override committed offsets).  It stops after ``--count`` records,
after ``--idle-timeout`` seconds without records once it has partitions, or on Ctrl-C.

JSON lines (``--format json``), one record per line::

    {"topic": "orders", "partition": 0, "offset": 17, "tstype": "create", "ts": 1767225600123,
     "headers": [{"key": "h", "value": "v"}], "key": "user-1", "payload": "hello"}

``key``, ``payload`` and header values are UTF-8 text when they are valid UTF-8, else base64
with ``"key_encoding": "base64"`` / ``"payload_encoding": "base64"`` / ``"value_encoding":
"base64"`` beside them; null when absent.  ``tstype`` is "create", "logappend" or "none".
``--format value`` prints only the values, one per line, bytes as they are.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from ..config import parse_config
from ..consumer import (  # types only: no network layer yet
    OFFSET_BEGINNING,
    OFFSET_END,
    TopicPartition,
)
from .common import (
    CommandError,
    Out,
    ProtocolLog,
    UsageError,
    add_common,
    add_format,
    client_config,
    error_name,
    iso_ms,
    make_tracer,
    note,
    text_or_base64,
)

if TYPE_CHECKING:
    from ..consumer import Consumer
    from ..records import Record


_TSTYPE = {0: "create", 1: "logappend"}
_BATCH = 500
_POLL_S = 0.2
_UNKNOWN_TOPIC = 3


def add_consume(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("examples:\n"
                "  kwire consume -b localhost:9092 -t orders --from-beginning --count 10 --format json\n"
                "  kwire consume -b localhost:9092 -t orders -p 0 --offset 1200 --idle-timeout 2\n"
                "  kwire consume -b localhost:9092 -t orders -g audit --from-beginning\n")
    p.add_argument("-t", "--topic", required=True, help="the topic to read")
    p.add_argument("-p", "--partition", type=int, action="append", metavar="P",
                   help="only partition P (repeatable; default: all); not with --group")
    p.add_argument("-g", "--group", help="consume as a member of this group (subscribe, commit)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the beginning of each partition")
    start.add_argument("--from-end", action="store_true", help="start at the end: only new records (the default, unless "
                       "-X auto.offset.reset=earliest or a group has committed offsets)")
    start.add_argument("-o", "--offset", type=int, metavar="N", help="start at offset N of each partition")
    start.add_argument("--from-timestamp", type=int, metavar="MS",
                       help="start at the first record at or after MS (epoch milliseconds)")
    p.add_argument("-c", "--count", type=int, metavar="N", help="stop after N records")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                   help="stop after this long without records (once partitions are assigned)")
    p.add_argument("--join-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="with --group: give up if the group assigns no partition within this long "
                        "(default 60)")
    p.add_argument("--no-commit", action="store_true", help="with --group: commit nothing")
    add_format(p, ("text", "json", "value"),
               help_text="text for people (default), json: one object per line, value: the values only")
    add_common(p)


def run_consume(args: argparse.Namespace) -> int:
    from ..consumer import Consumer

    _check_args(args)
    overrides: dict[str, Any] = {}
    if args.group:
        overrides["group.id"] = args.group
        if args.from_beginning:
            overrides["auto.offset.reset"] = "earliest"
        elif args.from_end:
            overrides["auto.offset.reset"] = "latest"
        if args.no_commit:
            overrides["enable.auto.commit"] = False
    conf = client_config(args, "consumer", overrides=overrides)
    topic = args.topic
    out = Out()
    printer = _Printer(args.format, out)
    count = 0
    with ProtocolLog(conf):
        consumer = Consumer(conf, tracer=make_tracer(args))
        try:
            partitions = _partitions(consumer, topic, args)
            start = _start_offsets(consumer, topic, partitions, args, conf)
            if args.group:
                def on_assign(c: Consumer, assigned: list[TopicPartition]) -> None:
                    if start is not None:  # explicit start offsets win over committed ones
                        c.assign([TopicPartition(tp.topic, tp.partition, start[tp.partition]) for tp in assigned])

                consumer.subscribe([topic], on_assign=on_assign)
            else:
                assert start is not None  # (None only for a group)
                consumer.assign([TopicPartition(topic, p, start[p]) for p in partitions])
            count = _loop(consumer, args, printer, out)
            if args.group and count and not args.no_commit:
                try:
                    consumer.commit(asynchronous=False)
                except Exception as exc:
                    raise CommandError(f"commit of group {args.group!r} failed: {exc}") from None
        finally:
            try:
                out.flush()
            finally:
                consumer.close()
    note(f"{count} record{'s' if count != 1 else ''}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if args.group and args.partition:
        raise UsageError("--partition is for reading without a group (with --group, the group assigns partitions)")
    if args.no_commit and not args.group:
        raise UsageError("--no-commit goes with --group")
    if args.offset is not None and args.offset < 0:
        raise UsageError("--offset must be >= 0 (use --from-end for the end)")
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        raise UsageError("--idle-timeout must be positive")


def _partitions(consumer: Consumer, topic: str, args: argparse.Namespace) -> list[int]:
    """The topic's partitions (those of ``-p``), checking the topic exists."""
    snap = consumer.list_topics(topic, timeout=args.timeout)
    info = snap.topics.get(topic)
    if info is None or (info.error_code == _UNKNOWN_TOPIC and not info.partitions):
        raise CommandError(f"unknown topic {topic!r}")
    if info.error_code and not info.partitions:
        raise CommandError(f"topic {topic!r}: {error_name(info.error_code)}")
    have = sorted(info.partitions)
    if not args.partition:
        return have
    missing = sorted(set(args.partition) - set(have))
    if missing:
        raise CommandError(f"topic {topic!r} has no partition {', '.join(map(str, missing))} "
                           f"(it has {len(have)}: 0..{len(have) - 1})")
    return sorted(set(args.partition))


def _start_offsets(consumer: Consumer, topic: str, partitions: list[int], args: argparse.Namespace,
                   conf: dict[str, Any]) -> dict[int, int] | None:
    """{partition: start offset}, or None when a group's committed offsets decide."""
    if args.offset is not None:
        return {p: args.offset for p in partitions}
    if args.from_timestamp is not None:
        found = consumer.offsets_for_times([TopicPartition(topic, p, args.from_timestamp) for p in partitions],
                                           timeout=args.timeout)
        # -1: no record that new; start at the end, for what comes next
        return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_END for tp in found}
    if args.group:
        return None
    if args.from_beginning:
        return {p: OFFSET_BEGINNING for p in partitions}
    if args.from_end:
        return {p: OFFSET_END for p in partitions}
    earliest = parse_config(conf, role="consumer").auto_offset_reset == "earliest"
    return {p: OFFSET_BEGINNING if earliest else OFFSET_END for p in partitions}


IDLE_HINT_S = 10.0  # without --idle-timeout: after this long without records, say it waits


def _loop(consumer: Consumer, args: argparse.Namespace, printer: _Printer, out: Out) -> int:
    """Print records until --count, --idle-timeout or Ctrl-C; the number printed."""
    count = 0
    limit = args.count
    now = time.monotonic()
    active_since = None if args.group else now  # idle time counts once partitions are assigned
    join_deadline = now + args.join_timeout
    last_record = None
    hinted = False
    try:
        while limit is None or count < limit:
            want = _BATCH if limit is None else min(_BATCH, limit - count)
            records = consumer.consume(want, timeout=_POLL_S)
            now = time.monotonic()
            if records:
                for r in records:
                    printer.write(r)
                out.flush()
                count += len(records)
                last_record = now
                if active_since is None:
                    active_since = now
                continue
            if active_since is None:
                if consumer.assignment():
                    active_since = now
                elif now >= join_deadline:
                    raise CommandError(f"group {args.group!r} assigned no partition of {args.topic!r} "
                                       f"within {args.join_timeout:g} s")
                continue
            idle_from = max(active_since, last_record or active_since)
            if args.idle_timeout is not None and now - idle_from >= args.idle_timeout:
                break
            if args.idle_timeout is None and not hinted and now - idle_from >= IDLE_HINT_S:
                # like kafka-console-consumer it waits for more; say so once, and how to stop
                hinted = True
                waited = f"{count} of {limit} records" if limit is not None else f"{count} records"
                print(f"kwire consume: {waited} so far, none for {IDLE_HINT_S:g} s; waiting for more "
                      f"(--idle-timeout SECONDS stops after that long without records, Ctrl-C stops now)",
                      file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass  # stop reading; the caller still commits and closes
    return count


class _Printer:
    def __init__(self, fmt: str, out: Out) -> None:
        self.fmt = fmt
        self.out = out
        self.stream = out.stream

    def write(self, r: Any) -> None:
        """``r``: a Record (the command does not ask for PartitionEOF events, the other half of
        ``consume()``'s answer)."""
        if self.fmt == "json":
            self.stream.write(json.dumps(record_json(r), ensure_ascii=False) + "\n")
        elif self.fmt == "value":
            self._write_bytes((r.value or b"") + b"\n")
        else:
            self.stream.write(record_text(r) + "\n")

    def _write_bytes(self, data: bytes) -> None:
        buf = getattr(self.stream, "buffer", None)
        if buf is not None:
            self.stream.flush()
            buf.write(data)
        else:
            self.stream.write(data.decode("utf-8", "replace"))


def record_json(r: Record) -> dict[str, Any]:
    obj: dict[str, Any] = {"topic": r.topic, "partition": r.partition, "offset": r.offset,
           "tstype": _TSTYPE.get(r.timestamp_type, "none"), "ts": r.timestamp, "headers": []}
    for hk, hv in r.headers or ():
        text, b64 = text_or_base64(hv)
        h = {"key": hk, "value": text}
        if b64:
            h["value_encoding"] = "base64"
        obj["headers"].append(h)
    for field, data in (("key", r.key), ("payload", r.value)):
        text, b64 = text_or_base64(data)
        obj[field] = text
        if b64:
            obj[f"{field}_encoding"] = "base64"
    return obj


def _printable(text: str) -> str:
    """Control characters as escapes, so one record stays one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _shown(data: bytes | None) -> str:
    if data is None:
        return "null"
    text, b64 = text_or_base64(data)
    return f"base64:{text}" if b64 else _printable(text)


def record_text(r: Record) -> str:
    """``topic [partition] @offset  timestamp  key=K  h=v ...  value`` (values escaped onto one line)."""
    parts = [f"{r.topic} [{r.partition}] @{r.offset}", iso_ms(r.timestamp) or "-"]
    if r.key is not None:
        parts.append(f"key={_shown(r.key)}")
    for hk, hv in r.headers or ():
        parts.append(f"{_printable(hk)}={_shown(hv)}")
    parts.append(_shown(r.value))
    return "  ".join(parts)

