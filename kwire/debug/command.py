"""``kwire decode``: Kafka frames from a capture file, or one frame given as hex.

Exit status: 0 when everything decoded, 1 when some bytes could not be (everything else is
still printed), 2 for usage errors.
"""
from __future__ import annotations

import argparse
import binascii
import os
import sys

from ..errors import KwireError
from ..protocol import api as P
from .render import FORMATS, RECORD_MODES, Renderer

EXIT_OK, EXIT_UNDECODED, EXIT_USAGE = 0, 1, 2

USAGE_EXAMPLES = """\
examples:
  kwire decode traffic.pcapng                      frames on port 9092 (and auto-detected)
  kwire decode traffic.pcap --port 9093 --port 19092 --format json
  kwire decode --hex 0000001f00120003... --request
  kwire decode --hex 00000001000000... --response --api ApiVersions --version 3
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = USAGE_EXAMPLES
    p.add_argument("capture", nargs="?", help="a .pcap or .pcapng capture file")
    p.add_argument("--port", action="append", type=int, metavar="PORT",
                   help="broker port of the Kafka connections (repeatable; default 9092)")
    p.add_argument("--no-auto", dest="auto", action="store_false",
                   help="do not auto-detect Kafka connections on other ports")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text for people (default), json for scripts: one object per line")
    p.add_argument("--records", choices=RECORD_MODES, default="summary",
                   help="record payloads: a summary (default) or every record")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour text output (auto: when stdout is a terminal)")
    p.add_argument("--hex", help="one frame as hex, with or without its 4-byte size prefix")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--request", action="store_true", help="the --hex frame is a request (the default)")
    kind.add_argument("--response", action="store_true",
                      help="the --hex frame is a response (give --api and --version)")
    p.add_argument("--api", help="API name or key of a --response frame, e.g. ApiVersions or 18")
    p.add_argument("--version", type=int, help="API version of a --response frame")


def _usage(msg: str) -> int:
    print(f"kwire decode: {msg}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace, stdout=None) -> int:
    try:
        return _run(args, stdout if stdout is not None else sys.stdout)
    except BrokenPipeError:  # `kwire decode x.pcap | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK


def _run(args: argparse.Namespace, out) -> int:
    color = {"auto": None, "always": True, "never": False}[args.color]
    renderer = Renderer(args.format, args.records, stream=out, color=color)
    if args.capture and args.hex:
        return _usage("give a capture file or --hex, not both")
    if args.hex:
        return _run_hex(args, renderer)
    if args.capture:
        if args.request or args.response or args.api or args.version is not None:
            return _usage("--request/--response/--api/--version go with --hex")
        return _run_capture(args, renderer)
    return _usage("give a capture file (.pcap/.pcapng) or --hex HEX; see kwire decode --help")


def _run_hex(args, renderer: Renderer) -> int:
    if args.port or not args.auto:
        return _usage("--port/--no-auto go with a capture file")
    text = "".join(args.hex.split())
    if text[:2].lower() == "0x":
        text = text[2:]
    try:
        frame = binascii.unhexlify(text)
    except (binascii.Error, ValueError) as exc:
        return _usage(f"--hex is not valid hex: {exc}")
    if args.response:
        if args.api is None or args.version is None:
            return _usage("--response needs --api and --version")
        try:
            api = P.api(int(args.api) if args.api.lstrip("-").isdigit() else args.api)
        except KwireError as exc:
            return _usage(str(exc))
    elif args.api is not None or args.version is not None:
        return _usage("--api/--version describe a --response frame (a request names its own)")
    event = {"kind": "request" if not args.response else "response", "ts": None,
             "to_broker": not args.response}
    try:
        payload = P.strip_size_prefix(frame, size_prefix=None)
        event["size_bytes"] = len(payload) + 4
        if args.response:
            rf = P.decode_response(api, args.version, payload, size_prefix=False)
            event.update(api=rf.api.name, api_key=rf.api.key, version=rf.version,
                         correlation_id=rf.correlation_id, body=rf.body)
        else:
            rf = P.decode_request(payload, size_prefix=False)
            event.update(api=rf.api.name, api_key=rf.api.key, version=rf.version,
                         correlation_id=rf.correlation_id, client_id=rf.client_id, body=rf.body)
    except KwireError as exc:
        pos = getattr(exc, "position", None)
        reason = f"{'response' if args.response else 'request'} cannot be decoded: {exc}"
        if pos is not None and "position" not in str(exc):
            reason += f" (decoder position {pos})"
        renderer.write({"kind": "undecoded", "ts": None, "to_broker": not args.response, "data": frame,
                        "size_bytes": len(frame), "reason": reason})
        return EXIT_UNDECODED
    renderer.write(event)
    return EXIT_UNDECODED if renderer.problems else EXIT_OK


def _run_capture(args, renderer: Renderer) -> int:
    from .capture import CaptureError, decode_capture

    ports = args.port or [9092]
    try:
        result = decode_capture(args.capture, ports=ports, auto_detect=args.auto)
    except FileNotFoundError:
        return _usage(f"{args.capture}: no such file")
    except CaptureError as exc:
        print(f"kwire decode: {exc}", file=sys.stderr)
        return EXIT_UNDECODED
    for item in result.items:
        renderer.write(item.to_event())
    s = result.stats
    problems = result.problems + renderer.problems
    summary = (f"{s['requests']} requests, {s['responses']} responses on {s['kafka_connections']} "
               f"Kafka connection(s) ({s['auto_detected']} auto-detected) in {s['packets']} packets; "
               f"{s['undecoded']} undecodable piece(s) ({s['undecoded_bytes']} bytes), {s['gaps']} gap(s)")
    if renderer.problems:
        summary += f", {renderer.problems} record payload(s) that could not be decoded"
    if args.format == "text":
        renderer.stream.write(f"-- {summary}\n")
    else:
        print(f"kwire decode: {summary}", file=sys.stderr)
    renderer.flush()
    return EXIT_UNDECODED if problems else EXIT_OK
