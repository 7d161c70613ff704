"""``kwire metadata`` and ``kwire topics``: what the cluster's Metadata answer says, and CreateTopics.

::

    kwire metadata -b localhost:9092                 brokers, controller, every topic's partitions
    kwire metadata -b localhost:9092 -t orders --format json
    kwire topics -b localhost:9092                   one line per topic
    kwire topics -b localhost:9092 --describe orders
    kwire topics -b localhost:9092 --create orders --partitions 6 --replication-factor 1
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import TopicAlreadyExistsError
from ..net.metadata import ClusterSnapshot, TopicInfo
from ..protocol.schema import ZERO_UUID
from .common import (
    CommandError,
    Out,
    ProtocolLog,
    UsageError,
    add_common,
    add_format,
    client_config,
    error_name,
    make_tracer,
)

if TYPE_CHECKING:
    from ..admin import Admin

_UNKNOWN_TOPIC = 3


# --- shared with the other commands -------------------------------------------------------------

def open_admin(args: argparse.Namespace, **overrides: Any) -> tuple[Admin, ProtocolLog]:
    """An Admin on ``--bootstrap`` with ``-X``, ``--trace``; (admin, protocol-log guard)."""
    from ..admin import Admin

    conf = client_config(args, "admin", overrides=overrides or None)
    plog = ProtocolLog(conf)
    try:
        return Admin(conf, tracer=make_tracer(args)), plog
    except BaseException:
        plog.close()
        raise


def snapshot(admin: Admin, args: argparse.Namespace,
             topics: str | Iterable[str] | None = None) -> ClusterSnapshot:
    """Metadata for ``topics`` (None: all); unknown topics asked for by name are an error."""
    snap = admin.list_topics(topics, timeout=args.timeout)
    for name in ([topics] if isinstance(topics, str) else topics or ()):
        info = snap.topics.get(name)
        if info is None or (info.error_code == _UNKNOWN_TOPIC and not info.partitions):
            raise CommandError(f"unknown topic {name!r}")
        if info.error_code and not info.partitions:
            raise CommandError(f"topic {name!r}: {error_name(info.error_code)}")
    return snap


def topic_json(t: TopicInfo) -> dict[str, Any]:
    return {
        "name": t.name,
        "topic_id": None if t.topic_id == ZERO_UUID else str(t.topic_id),
        "internal": t.is_internal,
        "error": error_name(t.error_code),
        "partitions": [{
            "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr),
            "offline_replicas": list(p.offline_replicas), "error": error_name(p.error_code),
        } for _, p in sorted(t.partitions.items())],
    }


def snapshot_json(snap: ClusterSnapshot) -> dict[str, Any]:
    return {
        "cluster_id": snap.cluster_id,
        "controller_id": snap.controller_id,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for _, b in sorted(snap.brokers.items())],
        "topics": [topic_json(t) for _, t in sorted(snap.topics.items())],
    }


def _replication(t: TopicInfo) -> int:
    return max((len(p.replicas) for p in t.partitions.values()), default=0)


def _partition_rows(topics: Iterable[TopicInfo]) -> Iterator[list[Any]]:
    for t in topics:
        for _, p in sorted(t.partitions.items()):
            yield [t.name, p.partition, p.leader, list(p.replicas), list(p.isr),
                   list(p.offline_replicas), error_name(p.error_code)]


_PARTITION_COLUMNS = ["topic", "partition", "leader", "replicas", "isr", "offline", "error"]
_RIGHT = ("partition", "leader", "partitions", "replication", "node id", "port")


# --- kwire metadata ------------------------------------------------------------------------------

def add_metadata(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", action="append", metavar="TOPIC",
                   help="only this topic (repeatable; default: every topic)")
    add_format(p)
    add_common(p)


def run_metadata(args: argparse.Namespace) -> int:
    admin, plog = open_admin(args)
    with plog, admin:
        snap = snapshot(admin, args, args.topic)
    out = Out()
    if args.format == "json":
        out.json(snapshot_json(snap))
        return 0
    controller = snap.controller_id
    out.line(f"cluster {snap.cluster_id or '-'}  controller {controller if controller >= 0 else '-'}  "
             f"brokers {len(snap.brokers)}  topics {len(snap.topics)}")
    out.line()
    out.table(["node id", "host", "port", "rack", "controller"],
              [[b.node_id, b.host, b.port, b.rack, "yes" if b.node_id == controller else ""]
               for _, b in sorted(snap.brokers.items())], title="brokers", right=_RIGHT)
    if snap.topics:
        out.line()
        topics = [t for _, t in sorted(snap.topics.items())]
        out.table(_PARTITION_COLUMNS, _partition_rows(topics), title="partitions", right=_RIGHT)
    return 0


# --- kwire topics --------------------------------------------------------------------------------

def add_topics(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("examples:\n"
                "  kwire topics -b localhost:9092\n"
                "  kwire topics -b localhost:9092 --describe orders --format json\n"
                "  kwire topics -b localhost:9092 --create orders --partitions 6 --replication-factor 1\n")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--describe", metavar="TOPIC", help="partitions, leaders, replicas and ISR of TOPIC")
    what.add_argument("--create", metavar="TOPIC", help="create TOPIC")
    p.add_argument("--partitions", type=int, default=-1, metavar="N",
                   help="with --create: partition count (default: the broker's default)")
    p.add_argument("--replication-factor", type=int, default=-1, metavar="R",
                   help="with --create: replicas per partition (default: the broker's default)")
    p.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                   help="with --create: a topic configuration entry, e.g. retention.ms=60000 (repeatable)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: an existing topic is not an error")
    add_format(p)
    add_common(p)


def run_topics(args: argparse.Namespace) -> int:
    if args.create is None and (args.partitions != -1 or args.replication_factor != -1
                                or args.topic_config or args.if_not_exists):
        raise UsageError("--partitions, --replication-factor, --topic-config and --if-not-exists go with --create")
    if args.create is not None:
        return _create(args)
    admin, plog = open_admin(args)
    with plog, admin:
        snap = snapshot(admin, args, args.describe)
    out = Out()
    if args.describe is not None:
        t = snap.topics[args.describe]
        if args.format == "json":
            out.json(topic_json(t))
            return 0
        tid = "-" if t.topic_id == ZERO_UUID else str(t.topic_id)
        out.line(f"topic {t.name}  id {tid}  partitions {len(t.partitions)}  "
                 f"replication {_replication(t)}{'  internal' if t.is_internal else ''}")
        out.line()
        out.table(_PARTITION_COLUMNS, _partition_rows([t]), right=_RIGHT)
        return 0
    topics = [t for _, t in sorted(snap.topics.items())]
    if args.format == "json":
        out.json([{"name": t.name, "topic_id": None if t.topic_id == ZERO_UUID else str(t.topic_id),
                   "internal": t.is_internal, "partitions": len(t.partitions),
                   "replication_factor": _replication(t), "error": error_name(t.error_code)}
                  for t in topics])
        return 0
    out.table(["topic", "partitions", "replication", "internal", "error"],
              [[t.name, len(t.partitions), _replication(t), "yes" if t.is_internal else "",
                error_name(t.error_code)] for t in topics], right=_RIGHT)
    return 0


def _create(args: argparse.Namespace) -> int:
    from ..admin import NewTopic

    configs: dict[str, str] = {}
    for item in args.topic_config:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UsageError(f"--topic-config takes KEY=VALUE, got {item!r}")
        configs[k] = v
    if args.partitions == 0 or args.partitions < -1 or args.replication_factor == 0 or args.replication_factor < -1:
        raise UsageError("--partitions and --replication-factor must be positive")
    admin, plog = open_admin(args)
    existed = False
    with plog, admin:
        try:
            admin.create_topics([NewTopic(args.create, args.partitions, args.replication_factor, configs)],
                                timeout=args.timeout, wait_for_leaders=True)
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise CommandError(f"topic {args.create!r} already exists") from None
            existed = True
        snap = snapshot(admin, args, args.create)
    t = snap.topics[args.create]
    out = Out()
    if args.format == "json":
        out.json({"topic": t.name, "created": not existed, "partitions": len(t.partitions),
                  "replication_factor": _replication(t),
                  "topic_id": None if t.topic_id == ZERO_UUID else str(t.topic_id)})
    else:
        verb = "exists" if existed else "created"
        out.line(f"{verb}: topic {t.name} with {len(t.partitions)} partitions, "
                 f"replication factor {_replication(t)}")
    return 0
