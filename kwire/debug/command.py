"""``kwire decode``: Kafka frames from a capture file, a live interface or stdin (streamed), or
one frame given as hex; filtered, summarised or counted (docs/DECODE.md).

Exit status: 0 when everything decoded, 1 when some bytes could not be (everything else is
still printed), 2 for usage errors (bad arguments, a path that is not a readable file, a
``--hex`` frame whose size prefix disagrees with its length).
"""
from __future__ import annotations

import argparse
import binascii
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any, TextIO

from ..errors import KwireError
from ..protocol import api as P
from .partial import partial_request, partial_response
from .render import FORMATS, RECORD_MODES, Renderer

if TYPE_CHECKING:
    from .capture import Item
    from .partial import Partial
    from .select import Filters
    from .stats import TopicNames

EXIT_OK, EXIT_UNDECODED, EXIT_USAGE = 0, 1, 2

USAGE_EXAMPLES = """\
examples:
  kwire decode traffic.pcapng                      frames on port 9092 (and auto-detected)
  kwire decode traffic.pcap --port 9093 --port 19092 --format json
  kwire decode traffic.pcap --summary              one line per frame, with the errors it carries
  kwire decode traffic.pcap --group billing        the group's requests and their responses
  kwire decode traffic.pcap --api Fetch,ListOffsets --version 12-17 --topic orders
  kwire decode traffic.pcap --errors --summary     frames with a non-zero error code anywhere
  kwire decode traffic.pcap --stats                counts, errors, rtt percentiles, records, groups
  kwire decode -i lo --port 9092 --summary         live, streaming, until Ctrl-C
  tcpdump -i lo -U -w - port 9092 | kwire decode - a capture on stdin, decoded as it streams
  kwire decode --hex 0000001f00120003... --request
  kwire decode --hex 00000001000000... --response --api ApiVersions --version 3

filters (capture files; all given must hold): --api NAME[,NAME] (names, keys or globs),
--version V[,V|LO-HI], --corr N[,N|LO-HI], --client-id ID, --broker HOST:PORT (or PORT),
--group G, --topic T (repeatable; globs with * ? [ ]), --errors.  --client-id, --group and
--topic select a request and its response together.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = USAGE_EXAMPLES
    p.add_argument("capture", nargs="?", help="a .pcap or .pcapng capture file, or - for a capture streamed on stdin")
    p.add_argument("-i", "--interface", metavar="IFACE",
                   help="capture live on this interface (through tcpdump, on the --port ports) and print "
                        "frames as they are paired; Ctrl-C stops")
    p.add_argument("--count", type=int, metavar="N",
                   help="with -i or -: stop after N frames (requests and responses) were shown")
    p.add_argument("--port", action="append", type=int, metavar="PORT",
                   help="broker port of the Kafka connections (repeatable; default 9092)")
    p.add_argument("--no-auto", dest="auto", action="store_false",
                   help="do not auto-detect Kafka connections on other ports")
    p.add_argument("--tls-keylog", metavar="FILE",
                   help="decrypt TLS connections on the --port ports with this key log (SSLKEYLOGFILE "
                        "format, e.g. librdkafka's ssl.keylog.file), through tshark")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text for people (default), json for scripts: one object per line")
    p.add_argument("--records", choices=RECORD_MODES, default="summary",
                   help="record payloads: a summary (default) or every batch and record")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour text output (auto: when stdout is a terminal)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--summary", action="store_true",
                      help="one line per frame: time, packet, route, client id, api, corr, size, rtt, errors")
    view.add_argument("--stats", action="store_true",
                      help="statistics instead of frames: APIs, errors, rtt, records per partition, groups")
    f = p.add_argument_group("filters (capture files)")
    f.add_argument("--api", action="append", metavar="NAME[,NAME]",
                   help="only these APIs (names, keys or globs); with --hex --response: the frame's API")
    f.add_argument("--version", metavar="V[,V|LO-HI]",
                   help="only these API versions; with --hex --response: the frame's version")
    f.add_argument("--corr", metavar="N[,N|LO-HI]", help="only these correlation ids")
    f.add_argument("--client-id", action="append", metavar="ID", help="only requests of this client id, and their responses")
    f.add_argument("--broker", action="append", metavar="HOST:PORT", help="only connections to this broker")
    f.add_argument("--group", action="append", metavar="GROUP", help="only this group's requests, and their responses")
    f.add_argument("--topic", action="append", metavar="TOPIC",
                   help="only frames naming this topic (by name, or by id through the capture's Metadata)")
    f.add_argument("--errors", action="store_true", help="only frames carrying a non-zero error code")
    h = p.add_argument_group("one frame as hex")
    h.add_argument("--hex", help="one frame as hex, with or without its 4-byte size prefix")
    kind = h.add_mutually_exclusive_group()
    kind.add_argument("--request", action="store_true", help="the --hex frame is a request (the default)")
    kind.add_argument("--response", action="store_true",
                      help="the --hex frame is a response (give --api and --version)")


def _usage(msg: str) -> int:
    print(f"kwire decode: {msg}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    try:
        return _run(args, stdout if stdout is not None else sys.stdout)
    except BrokenPipeError:  # `kwire decode x.pcap | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK


_FILTER_ARGS = ("corr", "client_id", "broker", "group", "topic", "errors")


def _run(args: argparse.Namespace, out: TextIO) -> int:
    color = {"auto": None, "always": True, "never": False}[args.color]
    renderer = Renderer(args.format, args.records, stream=out, color=color, summary=args.summary)
    if sum(bool(x) for x in (args.capture, args.hex, args.interface)) > 1:
        return _usage("give one of: a capture file, -i IFACE, --hex")
    if args.count is not None and not (args.interface or args.capture == "-"):
        return _usage("--count goes with -i or - (a live or streamed capture)")
    if args.tls_keylog and not (args.capture and args.capture != "-"):
        return _usage("--tls-keylog goes with a capture file")
    if args.interface or args.capture == "-":
        if args.request or args.response:
            return _usage("--request/--response go with --hex")
        return _run_live(args, renderer)
    if args.hex:
        used = [f"--{a.replace('_', '-')}" for a in _FILTER_ARGS if getattr(args, a)]
        if used or args.stats:
            return _usage(f"{', '.join(used) or '--stats'} go with a capture file, not --hex")
        return _run_hex(args, renderer)
    if args.capture:
        if args.request or args.response:
            return _usage("--request/--response go with --hex")
        return _run_capture(args, renderer)
    return _usage("give a capture file (.pcap/.pcapng), -i IFACE or --hex HEX; see kwire decode --help")


def _decode_hex_frame(frame: bytes, args: argparse.Namespace, api: P.Api | None
                      ) -> tuple[bytes, P.RequestFrame | P.ResponseFrame]:
    """The frame decoded, with or without a size prefix.  A size prefix that does not match
    the length is an error, not a hint to decode the bytes as some other frame.  ``api``: the
    API of a --response frame (None for a request)."""
    def decode(payload: bytes) -> P.RequestFrame | P.ResponseFrame:
        if api is not None:
            return P.decode_response(api, args.version, payload, size_prefix=False)
        return P.decode_request(payload, size_prefix=False)

    def header_ok(at: int) -> bool:
        """A request header kwire knows starts at ``at``."""
        if len(frame) < at + 8:
            return False
        key, version, corr = struct.unpack_from(">hhi", frame, at)
        a = P.APIS.get(key)
        return a is not None and a.decodes(version) and corr >= 0

    n = len(frame)
    size = struct.unpack_from(">i", frame, 0)[0] if n >= 4 else None
    if size == n - 4:
        return frame[4:], decode(frame[4:])
    mismatch = _SizeMismatch(f"--hex: its size prefix says {size} bytes follow, but {n - 4} do "
                             "(fix the prefix, or leave it out)")
    if not args.response and header_ok(4) and not header_ok(0):
        raise mismatch  # a request behind a size prefix: the prefix is wrong
    try:
        return frame, decode(frame)
    except KwireError as exc:
        if size is not None and n >= 8:
            try:
                decode(frame[4:])
            except KwireError:
                pass
            else:
                raise mismatch from None  # the bytes after the prefix are a whole frame
        raise exc


class _SizeMismatch(Exception):
    pass


def _run_hex(args: argparse.Namespace, renderer: Renderer) -> int:
    if args.port or not args.auto:
        return _usage("--port/--no-auto go with a capture file")
    text = "".join(args.hex.split())
    if text[:2].lower() == "0x":
        text = text[2:]
    try:
        frame = binascii.unhexlify(text)
    except (binascii.Error, ValueError) as exc:
        return _usage(f"--hex is not valid hex: {exc}")
    api: P.Api | None = None  # a --response frame's API and version
    version: int | None = None
    if args.response:
        if not args.api or args.version is None:
            return _usage("--response needs --api and --version")
        if len(args.api) > 1 or "," in args.api[0]:
            return _usage("--response takes one --api")
        try:
            version = args.version = int(args.version)
        except ValueError:
            return _usage(f"--version {args.version!r}: give the response's version, a number")
        name = args.api[0]
        try:
            api = P.api(int(name) if name.lstrip("-").isdigit() else name)
        except KwireError as exc:
            return _usage(str(exc))
    elif args.api is not None or args.version is not None:
        return _usage("--api/--version describe a --response frame (a request names its own)")
    event: dict[str, Any] = {"kind": "request" if not args.response else "response", "ts": None,
             "to_broker": not args.response}
    try:
        payload, rf = _decode_hex_frame(frame, args, api)
        event["size_bytes"] = len(payload) + 4
        event.update(api=rf.api.name, api_key=rf.api.key, version=rf.version, correlation_id=rf.correlation_id)
        if isinstance(rf, P.RequestFrame):
            event["client_id"] = rf.client_id
        event["body"] = rf.body
    except _SizeMismatch as exc:
        return _usage(str(exc))
    except KwireError as exc:
        pos = getattr(exc, "position", None)
        reason = f"{'response' if args.response else 'request'} cannot be decoded: {exc}"
        if pos is not None and "position" not in str(exc):
            reason += f" (decoder position {pos})"
        # The frame as decoded: with its 4-byte size prefix (one is added when it had none, so
        # byte positions always count it).
        prefixed = frame if len(frame) >= 4 and struct.unpack_from(">i", frame, 0)[0] == len(frame) - 4 \
            else struct.pack(">i", len(frame)) + frame
        payload = prefixed[4:]
        part: Partial | None
        if api is not None and version is not None:  # a --response frame (both are set)
            part = partial_response(api, version, payload) if api.decodes(version) else None
        else:
            part = partial_request(payload)
        if part is not None and part.reason:  # the same failure, its position counted in the frame
            reason = f"{'response' if args.response else 'request'} cannot be decoded: {part.reason}"
        ev: dict[str, Any] = {"kind": "undecoded", "ts": None, "to_broker": not args.response, "data": prefixed,
              "size_bytes": len(prefixed), "reason": reason, "partial": part}
        if part is not None:
            ev.update(api=part.header.get("api") or (api.name if api else None),
                      api_key=part.header.get("api_key", api.key if api else None),
                      version=part.header.get("api_version", args.version),
                      correlation_id=part.header.get("correlation_id"), client_id=part.header.get("client_id"))
        renderer.write(ev)
        return EXIT_UNDECODED
    renderer.write(event)
    return EXIT_UNDECODED if renderer.problems else EXIT_OK


def _filters(args: argparse.Namespace) -> Filters:
    from .select import Filters, parse_int_set

    return Filters(apis=args.api or [], versions=parse_int_set(args.version, "--version") if args.version else None,
                   corrs=parse_int_set(args.corr, "--corr") if args.corr else None,
                   client_ids=args.client_id or [], brokers=args.broker or [], groups=args.group or [],
                   topics=args.topic or [], errors=args.errors)


CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz")


def _captures_in(directory: str) -> list[str]:
    """The capture files of a directory (not its subdirectories), by name."""
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.lower().endswith(CAPTURE_SUFFIXES) and os.path.isfile(os.path.join(directory, n)))


def _capture_problem(path: str) -> str | None:
    """A usage message when the capture cannot be read."""
    if not os.path.exists(path):
        return f"{path}: no such file"
    if not os.access(path, os.R_OK):
        return f"{path}: not readable (permission denied)"
    return None


def _run_capture(args: argparse.Namespace, renderer: Renderer) -> int:
    """One capture file; or a directory: each capture file in it (by name), one after the
    other, each decoded on its own (connections do not carry over between files).  Text output
    heads each file's part with ``== FILE ==``; JSON events and stats carry ``"file"``."""
    if not os.path.isdir(args.capture):
        return _run_capture_file(args, renderer, None)
    try:
        files = _captures_in(args.capture)
    except OSError as exc:
        return _usage(f"{args.capture}: {exc.strerror or exc}")
    if not files:
        return _usage(f"{args.capture}: a directory without capture files ({', '.join(CAPTURE_SUFFIXES)})")
    worst = EXIT_OK
    for path in files:
        if args.format == "text":
            renderer.stream.write(f"== {path} ==\n")
        code = _run_capture_file(argparse.Namespace(**{**vars(args), "capture": path}), renderer, path)
        worst = max(worst, code)
    return worst


def _run_capture_file(args: argparse.Namespace, renderer: Renderer, label: str | None) -> int:
    from .capture import CaptureError, decode_capture
    from .select import topic_names_from

    try:
        filters = _filters(args)
    except ValueError as exc:
        return _usage(str(exc))
    problem = _capture_problem(args.capture)
    if problem:
        return _usage(problem)
    ports = args.port or [9092]
    try:
        result = decode_capture(args.capture, ports=ports, auto_detect=args.auto, tls_keylog=args.tls_keylog)
    except CaptureError as exc:
        print(f"kwire decode: {exc}", file=sys.stderr)
        return EXIT_UNDECODED
    except OSError as exc:
        return _usage(f"{args.capture}: {exc.strerror or exc}")
    topic_names = topic_names_from(result.items)
    filters.topic_names = topic_names
    renderer.topic_names = topic_names
    items = [i for i in result.items if filters.accepts(i)] if filters.active else result.items
    if args.stats:
        from .stats import capture_stats, stats_lines

        stats = capture_stats(items, topic_names)
        if args.format == "json":
            renderer.stream.write(json.dumps(stats if label is None else {"file": label, **stats},
                                             ensure_ascii=False) + "\n")
        else:
            renderer.stream.write("\n".join(stats_lines(stats)) + "\n")
    else:
        for item in items:
            event = item.to_event()
            if label is not None:
                event["file"] = label
            renderer.write(event)
    s = result.stats
    problems = result.problems + renderer.problems
    summary = (f"{s['requests']} requests, {s['responses']} responses on {s['kafka_connections']} "
               f"Kafka connection(s) ({s['auto_detected']} auto-detected) in {s['packets']} packets; "
               f"{s['undecoded']} undecodable piece(s) ({s['undecoded_bytes']} bytes), {s['gaps']} gap(s)")
    if s.get("tls_connections"):
        summary += f", {s['tls_connections']} TLS connection(s) not decrypted"
    if s.get("tls_decrypted"):
        summary += f", {s['tls_decrypted']} TLS connection(s) decrypted"
    if renderer.problems:
        summary += f", {renderer.problems} record payload(s) that could not be decoded"
    if filters.active:
        summary += f"; {sum(1 for i in items if i.kind in ('request', 'response'))} frame(s) matched the filters"
    if args.format == "text":
        renderer.stream.write(f"-- {summary}\n")
    else:
        print(f"kwire decode: {summary}", file=sys.stderr)
    renderer.flush()
    return EXIT_UNDECODED if problems else EXIT_OK


def _summary_text(s: dict[str, int], renderer: Renderer, matched: int | None) -> str:
    text = (f"{s['requests']} requests, {s['responses']} responses on {s['kafka_connections']} "
            f"Kafka connection(s) ({s['auto_detected']} auto-detected) in {s['packets']} packets; "
            f"{s['undecoded']} undecodable piece(s) ({s['undecoded_bytes']} bytes), {s['gaps']} gap(s)")
    if s.get("tls_connections"):
        text += f", {s['tls_connections']} TLS connection(s) not decrypted"
    if renderer.problems:
        text += f", {renderer.problems} record payload(s) that could not be decoded"
    if matched is not None:
        text += f"; {matched} frame(s) matched the filters"
    return text


def _finish(args: argparse.Namespace, renderer: Renderer, text: str) -> None:
    if args.format == "text" and not args.stats:
        renderer.stream.write(f"-- {text}\n")
    else:
        print(f"kwire decode: {text}", file=sys.stderr)
    renderer.flush()


def _tcpdump(args: argparse.Namespace) -> subprocess.Popen[bytes]:
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        raise _UsageError("-i needs tcpdump (apt-get install tcpdump), which is not on PATH")
    ports = args.port or [9092]
    expr = " or ".join(f"tcp port {p}" for p in ports)
    cmd = [tcpdump, "-i", args.interface, "-U", "-n", "-s", "0", "-w", "-", expr]
    if os.geteuid() == 0:
        cmd[1:1] = ["-Z", "root"]  # write as root: no privilege drop needed for a pipe
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None  # stderr=PIPE
    line = proc.stderr.readline().decode(errors="replace").strip()
    if "listening on" not in line:
        proc.wait(timeout=10)
        rest = proc.stderr.read().decode(errors="replace").strip()
        raise _UsageError(f"tcpdump could not capture on {args.interface}: {' '.join(x for x in (line, rest) if x)}")
    print(f"kwire decode: {line}", file=sys.stderr)
    return proc


class _UsageError(Exception):
    pass


def _run_live(args: argparse.Namespace, renderer: Renderer) -> int:
    """-i IFACE (tcpdump's output) or - (stdin): decoded as the packets arrive."""
    from .capture import CaptureError
    from .live import LiveDecoder, packets
    from .select import topic_names_from

    try:
        filters = _filters(args)
    except ValueError as exc:
        return _usage(str(exc))
    proc: subprocess.Popen[bytes] | None = None
    source: IO[bytes]
    if args.interface:
        try:
            proc = _tcpdump(args)
        except _UsageError as exc:
            return _usage(str(exc))
        assert proc.stdout is not None  # stdout=PIPE
        source = proc.stdout
    else:
        source = sys.stdin.buffer
    decoder = LiveDecoder(args.port or [9092], auto_detect=args.auto and not args.interface)
    shown = 0
    kept: list[Item] = []
    topic_names: TopicNames = {}
    filters.topic_names = renderer.topic_names = topic_names

    def emit(items: Iterable[Item]) -> bool:
        nonlocal shown
        for it in items:
            if it.kind == "response" and it.api_key in (3, 19):
                topic_names.update(topic_names_from([it]))
            if filters.active and not filters.accepts(it):
                continue
            if args.stats:
                kept.append(it)
            else:
                renderer.write(it.to_event())
                renderer.flush()
            if it.kind in ("request", "response"):
                shown += 1
                if args.count is not None and shown >= args.count:
                    return False
        return True

    code = EXIT_OK
    try:
        for ts, buf, linktype in packets(source):
            if not emit(decoder.feed(ts, buf, linktype)):
                break
        else:
            emit(decoder.finish())
    except KeyboardInterrupt:
        pass
    except CaptureError as exc:
        print(f"kwire decode: {exc}", file=sys.stderr)
        code = EXIT_UNDECODED
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if args.stats:
        from .stats import capture_stats, stats_lines

        stats = capture_stats(kept, topic_names)
        renderer.stream.write((json.dumps(stats, ensure_ascii=False) if args.format == "json"
                               else "\n".join(stats_lines(stats))) + "\n")
    _finish(args, renderer, _summary_text(decoder.stats, renderer, shown if filters.active else None))
    if code == EXIT_OK and (decoder.problems or renderer.problems) and args.count is None:
        code = EXIT_UNDECODED
    return code
