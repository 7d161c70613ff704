"""The ``kwire`` command: ``python -m kwire`` or the ``kwire`` entry point.

Subcommands register themselves in ``COMMANDS``; each has an ``add_arguments(parser)`` and a
``run(args) -> int``.  The cluster commands (metadata, topics, groups, offsets, consume,
produce) live in :mod:`kwire.commands`.  Output meant for scripts goes to stdout; progress
and tables for people go to stderr/stdout through rich, which degrades to plain text when
piped.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from . import __version__, errors

# name -> (help, add_arguments(parser), run(args) -> exit status)
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


def _add_decode(p: argparse.ArgumentParser) -> None:
    from .debug import command

    command.add_arguments(p)


def _run_decode(args: argparse.Namespace) -> int:
    from .debug import command

    return command.run(args)


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", "-b", help="use this cluster instead of an embedded broker")
    p.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                   help="the embedded broker: Tansu (default, starts in well under a second) or Apache "
                        "Kafka (its jars fetched from Maven Central once; needs Java and Maven)")
    p.add_argument("--records", type=int, default=1_000_000, help="records to produce (default 1M)")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--topic", default="kwire-demo")
    p.add_argument("--group", default="kwire-demo")


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


def _cluster_commands() -> dict[str, Command]:
    from .commands import COMMANDS as cluster  # metadata, topics, groups, offsets, consume, produce

    return cluster


COMMANDS: dict[str, Command] = {
    **_cluster_commands(),
    "decode": ("decode Kafka frames: from a .pcap/.pcapng capture, a live interface (-i) or stdin (-), "
               "or one frame as hex; filters, --summary, --stats", _add_decode, _run_decode),
    "demo": ("the main job: embedded broker, produce, read, aggregate, commit", _add_demo, _run_demo),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only`` (the subcommand on the command line), the other
    subcommands are named but their arguments not added, so their modules (the network client
    for the cluster commands) are not imported: ``kwire decode`` starts faster."""
    parser = argparse.ArgumentParser(prog="kwire", description="Kafka wire-protocol client and debugger")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            add(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    first = (sys.argv[1:] if argv is None else argv)[:1]
    args = build_parser(first[0] if first and first[0] in COMMANDS else None).parse_args(argv)
    _, _, run = COMMANDS[args.command]
    try:
        return run(args)
    except errors.KwireError as exc:
        print(f"kwire {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
