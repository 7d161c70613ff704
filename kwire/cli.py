"""The ``kwire`` command: ``python -m kwire`` or the ``kwire`` entry point.

Subcommands register themselves in ``COMMANDS``; each has an ``add_arguments(parser)`` and a
``run(args) -> int``.  Output meant for scripts goes to stdout; progress and tables for
people go to stderr/stdout through rich, which degrades to plain text when piped.
"""
from __future__ import annotations

import argparse
import binascii
import json
import sys

from . import errors


def _add_decode(p: argparse.ArgumentParser) -> None:
    p.add_argument("capture", nargs="?", help="a .pcap/.pcapng capture (not yet supported)")
    p.add_argument("--hex", help="one frame as hex, with or without its 4-byte size prefix")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--request", action="store_true", help="the frame is a request (api/version from its header)")
    kind.add_argument("--response", action="store_true", help="the frame is a response (give --api and --version)")
    p.add_argument("--api", help="API name or key of a response frame, e.g. ApiVersions or 18")
    p.add_argument("--version", type=int, help="API version of a response frame")


def _run_decode(args) -> int:
    from .protocol import api as P

    if args.capture:
        print("kwire decode: reading captures is not implemented yet; use --hex", file=sys.stderr)
        return 2
    if not args.hex:
        print("kwire decode: give --hex HEX (and --request or --response)", file=sys.stderr)
        return 2
    try:
        frame = binascii.unhexlify("".join(args.hex.split()).removeprefix("0x"))
    except (binascii.Error, ValueError) as exc:
        print(f"kwire decode: --hex is not valid hex: {exc}", file=sys.stderr)
        return 2
    try:
        if args.response:
            if args.api is None or args.version is None:
                print("kwire decode: --response needs --api and --version", file=sys.stderr)
                return 2
            api = P.api(int(args.api) if args.api.isdigit() else args.api)
            out = P.decode_response(api, args.version, frame, size_prefix=None).to_dict()
        else:
            out = P.decode_request(frame, size_prefix=None).to_dict()
    except errors.KwireError as exc:
        pos = getattr(exc, "position", None)
        print(f"kwire decode: cannot decode: {exc}", file=sys.stderr)
        if pos is not None:
            print(f"  bytes from position {pos}: {frame[pos:pos + 64].hex()}", file=sys.stderr)
        return 1
    json.dump(P.to_jsonable(out), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", "-b", help="use this cluster instead of an embedded Tansu broker")
    p.add_argument("--records", type=int, default=1_000_000, help="records to produce (default 1M)")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--topic", default="kwire-demo")
    p.add_argument("--group", default="kwire-demo")


def _run_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args)


COMMANDS = {
    "decode": ("decode Kafka frames offline", _add_decode, _run_decode),
    "demo": ("the main job: embedded broker, produce, read, aggregate, commit", _add_demo, _run_demo),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kwire", description="Kafka wire-protocol client and debugger")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add, _) in COMMANDS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
