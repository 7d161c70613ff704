"""What every cluster command shares: options, client configuration, tracing, errors, output.

Output: tables through rich when the stream is a terminal, otherwise plain aligned columns
(a header row, then one row per line, cells without spaces) that ``awk``/``cut`` can take;
``--format json`` where a command offers it.  Errors are one line on stderr,
``kwire <command>: <what went wrong>``, and exit status 1; usage errors exit 2.
"""
from __future__ import annotations

import argparse
import base64
import datetime as _dt
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any, overload

from ..config import parse_config
from ..errors import KafkaTimeoutError, KwireError
from ..protocol.error_codes import BY_CODE

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
DEFAULT_TIMEOUT_S = 10.0
BOOTSTRAP_ENV = "KWIRE_BOOTSTRAP"


class CommandError(KwireError):
    """A failure a command reports as one line (unknown topic, group not found, ...)."""


class UsageError(CommandError):
    """Options that do not fit together (exit status 2)."""


# --- options -----------------------------------------------------------------------------------

def add_common(p: argparse.ArgumentParser, *, timeout_help: str | None = None) -> None:
    g = p.add_argument_group("connection and debugging (every command)")
    g.add_argument("-b", "--bootstrap", metavar="HOST:PORT[,...]",
                   help=f"bootstrap brokers (default: ${BOOTSTRAP_ENV})")
    g.add_argument("-X", dest="config", action="append", default=[], metavar="KEY=VALUE",
                   help="any kwire configuration property, e.g. -X client.id=me "
                        "-X debug=protocol (repeatable)")
    g.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=timeout_help or f"give up on the cluster after this long (default {DEFAULT_TIMEOUT_S:g})")
    g.add_argument("--trace", action="store_true",
                   help="print every request and response frame on stderr")
    g.add_argument("--trace-format", choices=("text", "json"), default="text",
                   help="frames as text for people (default) or one JSON object per line")
    g.add_argument("--trace-records", choices=("summary", "full"), default="summary",
                   help="record payloads in traced frames: a summary (default) or every record")


def add_format(p: argparse.ArgumentParser, choices: Sequence[str] = ("text", "json"), default: str = "text",
               help_text: str | None = None) -> None:
    p.add_argument("--format", choices=choices, default=default,
                   help=help_text or "text: tables for people (plain columns when piped); json: for scripts")


# --- configuration -----------------------------------------------------------------------------

def client_config(args: argparse.Namespace, role: str, defaults: dict[str, Any] | None = None,
                  overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The client's configuration: ``defaults`` < ``-X`` < ``overrides`` < ``--bootstrap``.

    Checked with :func:`kwire.config.parse_config` here, so a bad ``-X`` fails before anything
    connects.  Unless ``-X`` says otherwise, connecting gives up after ``--timeout``.
    """
    conf: dict[str, Any] = dict(defaults or {})
    timeout_ms = timeout_ms_of(args)
    conf.setdefault("client.id", "kwire-cli")
    conf.setdefault("socket.connection.setup.timeout.ms", max(1000, min(timeout_ms, 30_000)))
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-X takes KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    conf.update(overrides or {})
    bootstrap = args.bootstrap or conf.get("bootstrap.servers") or os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        raise UsageError(f"give the brokers with -b HOST:PORT (or set ${BOOTSTRAP_ENV})")
    conf["bootstrap.servers"] = bootstrap
    parse_config(conf, role=role)
    return conf


def timeout_ms_of(args: argparse.Namespace) -> int:
    t = getattr(args, "timeout", None)
    if t is None or t <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    return int(t * 1000)


def make_tracer(args: argparse.Namespace) -> Callable[[dict[str, Any]], None] | None:
    """The ``tracer=`` for Admin/Producer/Consumer when ``--trace`` is on, else None.

    Frames go to whatever ``sys.stderr`` is when each is written, so they interleave correctly
    with the command's own stderr output (and test harnesses that swap stderr see them)."""
    if not args.trace:
        return None
    from ..debug.trace import make_tracer as _make

    return _make(args.trace_format, records=args.trace_records)


class ProtocolLog:
    """``-X debug=protocol`` (or ``all``): the network client's one-line summaries of every
    frame go to the ``kwire.protocol`` logger at DEBUG; show them on stderr for the command's
    life."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.handler: logging.Handler | None = None
        debug = conf.get("debug") or ""
        contexts = debug if isinstance(debug, (list, tuple)) else [c.strip() for c in str(debug).split(",")]
        if "protocol" in contexts or "all" in contexts:
            self.handler = _StderrHandler()
            self.handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
            log = logging.getLogger("kwire.protocol")
            log.addHandler(self.handler)
            log.setLevel(logging.DEBUG)

    def close(self) -> None:
        if self.handler is not None:
            logging.getLogger("kwire.protocol").removeHandler(self.handler)
            self.handler = None

    def __enter__(self) -> ProtocolLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:
    _StreamHandler = logging.StreamHandler[IO[str]]
else:  # (subscriptable at run time only from Python 3.11)
    _StreamHandler = logging.StreamHandler


class _StderrHandler(_StreamHandler):
    """A StreamHandler on the current ``sys.stderr`` (looked up per record)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


# --- running -----------------------------------------------------------------------------------

def one_line(text: object) -> str:
    return " ".join(str(text).split())


def run_command(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command: its failures become one line on stderr, never a traceback.

    ``KWIRE_TRACEBACK=1`` lets unexpected exceptions (bugs) through with their traceback."""
    name = args.command
    try:
        return fn(args)
    except UsageError as exc:
        print(f"kwire {name}: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KafkaTimeoutError as exc:  # say where we were waiting, and for how long
        where = args.bootstrap or os.environ.get(BOOTSTRAP_ENV) or "the cluster"
        print(f"kwire {name}: {one_line(exc)} ({where}, --timeout {args.timeout:g} s)", file=sys.stderr)
        return EXIT_ERROR
    except KwireError as exc:
        print(f"kwire {name}: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `kwire consume ... | head`: the reader left; stop quietly
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("KWIRE_TRACEBACK"):
            raise
        print(f"kwire {name}: {type(exc).__name__}: {one_line(exc)} "
              "(KWIRE_TRACEBACK=1 shows where)", file=sys.stderr)
        return EXIT_ERROR


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# --- values ------------------------------------------------------------------------------------

def error_name(code: int | None) -> str | None:
    if not code:
        return None
    entry = BY_CODE.get(code)
    return entry[1] if entry else f"UNKNOWN_ERROR_CODE_{code}"


def iso_ms(ts_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds; None for negative (no timestamp)."""
    if ts_ms is None or ts_ms < 0:
        return None
    t = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=ts_ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@overload
def text_or_base64(data: bytes) -> tuple[str, bool]: ...
@overload
def text_or_base64(data: None) -> tuple[None, bool]: ...
@overload
def text_or_base64(data: bytes | None) -> tuple[str | None, bool]: ...


def text_or_base64(data: bytes | None) -> tuple[str | None, bool]:
    """(text, is_base64): UTF-8 text when ``data`` is valid UTF-8, else its base64."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def cell(value: Any) -> str:
    """A table cell: "-" for nothing, comma-joined sequences."""
    if value is None or value == "":
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) if value else "-"
    return str(value)


# --- output --------------------------------------------------------------------------------------

class Out:
    """stdout for people (rich on a terminal, plain columns when piped) or for scripts (JSON)."""

    def __init__(self, stream: IO[str] | None = None, *, tty: bool | None = None,
                 width: int | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.width = width
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, force_terminal=self.tty or None,
                                    width=self.width, soft_wrap=False)
        return self._console

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")

    def json(self, value: Any) -> None:
        indent = 2 if self.tty else None
        self.stream.write(json.dumps(value, indent=indent, ensure_ascii=False) + "\n")

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
              right: Iterable[str] = ()) -> None:
        """A table: rich on a terminal; else a header row of upper-case names and aligned rows."""
        rows = [[cell(v) for v in row] for row in rows]
        right = set(right)
        if self.tty:
            from rich.table import Table
            from rich.text import Text

            t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
            for c in columns:
                t.add_column(c, justify="right" if c in right else "left", overflow="fold")
            for row in rows:
                t.add_row(*(Text(v) for v in row))
            self.console.print(t)
            return
        header = [c.upper().replace(" ", "_") for c in columns]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
        for row in [header] + rows:
            parts = [v.rjust(w) if columns[i] in right else v.ljust(w)
                     for i, (v, w) in enumerate(zip(row, widths))]
            self.stream.write("  ".join(parts).rstrip() + "\n")

    def flush(self) -> None:
        try:
            self.stream.flush()
        except (AttributeError, ValueError):
            pass


def stderr_tty() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def note(text: str) -> None:
    """A remark for people on stderr (only when stderr is a terminal: pipes stay clean)."""
    if stderr_tty():
        from rich.console import Console

        Console(stderr=True, highlight=False).print(text, markup=False, style="dim")
