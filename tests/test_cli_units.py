"""The cluster commands' broker-free parts: record rendering, JSON input, member decoding,
tables, usage errors.  (With brokers: tests/test_cli.py.)"""
from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from kwire.admin import GroupMember
from kwire.cli import main
from kwire.commands.common import Out, iso_ms, text_or_base64
from kwire.commands.consume import record_json, record_text
from kwire.commands.groups import _tps_text, member_json
from kwire.commands.produce import _from_json
from kwire.errors import KwireError
from kwire.protocol import api as P
from kwire.records import Record


def _rec(key, value, headers=(), ts=1_767_225_600_123, ts_type=0):
    return Record(42, ts, ts_type, key, value, list(headers), "orders", 3)


def test_record_json_marks_what_is_not_utf8():
    r = _rec(b"user-1", "héllo".encode(), [("h", b"1"), ("bin", b"\xff\x00"), ("none", None)])
    assert record_json(r) == {
        "topic": "orders", "partition": 3, "offset": 42, "tstype": "create", "ts": 1_767_225_600_123,
        "headers": [{"key": "h", "value": "1"}, {"key": "bin", "value": "/wA=", "value_encoding": "base64"},
                    {"key": "none", "value": None}],
        "key": "user-1", "payload": "héllo"}
    r = _rec(None, b"\x80\x81", ts=-1, ts_type=-1)
    j = record_json(r)
    assert (j["key"], j["payload"], j["payload_encoding"], j["tstype"]) == (None, "gIE=", "base64", "none")
    assert "key_encoding" not in j
    assert record_json(_rec(b"\xfe", b"", ts_type=1))["key_encoding"] == "base64"
    assert record_json(_rec(b"\xfe", b"", ts_type=1))["tstype"] == "logappend"


def test_json_output_is_json_input():
    """kwire consume --format json | kwire produce --format json keeps every byte."""
    r = _rec(b"\x00k", b"v\n\xff", [("h", b"\x01"), ("t", b"x")], ts=5)
    rec = _from_json(json.dumps(record_json(r)).encode(), 1)
    assert rec == {"key": b"\x00k", "value": b"v\n\xff", "headers": [("h", b"\x01"), ("t", b"x")],
                   "partition": 3, "timestamp": 5}
    assert _from_json(b'{"payload": "p", "ts": -1}', 1) == {"key": None, "value": b"p", "headers": [],
                                                           "partition": None, "timestamp": None}
    assert _from_json(b'{"value": [1, {"a": null}], "headers": [["k", "v"]]}', 1)["value"] == b'[1,{"a":null}]'


@pytest.mark.parametrize("line, why", [
    (b"{nope", "line 7: not JSON"),
    (b"[1, 2]", "line 7: expected a JSON object, got list"),
    (b'{"valu": "x"}', "line 7: unknown field(s) valu"),
    (b'{"value": "**", "value_encoding": "base64"}', "line 7: "),
    (b'{"value": "x", "value_encoding": "hex"}', "line 7: unknown encoding 'hex'"),
    (b'{"value": "x", "partition": "1"}', "line 7: partition must be an integer"),
    (b'{"value": "x", "headers": 3}', "line 7: headers must be an object or a list"),
])
def test_bad_json_input_names_the_line(line, why):
    with pytest.raises(KwireError) as exc:
        _from_json(line, 7)
    assert str(exc.value).startswith(why)


def test_record_text_is_one_line():
    r = _rec(b"k", b"two\nlines\tand \x00", [("h", b"\xff")])
    assert record_text(r) == ("orders [3] @42  2026-01-01T00:00:00.123Z  key=k  h=base64:/w==  "
                              "two\\nlines\\tand \\x00")
    assert record_text(_rec(None, None, ts=-1)) == "orders [3] @42  -  null"


def test_values_and_times():
    assert text_or_base64(b"\xe2\x9c\x93") == ("✓", False)
    assert text_or_base64(b"\xe2\x9c") == ("4pw=", True)
    assert text_or_base64(None) == (None, False)
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z" and iso_ms(-1) is None


def test_members_are_decoded_when_their_protocol_is_consumer():
    sub = P.encode_subscription(3, {"topics": ["a", "b"], "user_data": b"\x01", "generation_id": 4, "rack_id": "r1",
                                    "owned_partitions": [{"topic": "a", "partitions": [2, 0]}]})
    asg = P.encode_assignment(0, {"assigned_partitions": [{"topic": "a", "partitions": [1]},
                                                          {"topic": "b", "partitions": [0, 3]}], "user_data": None})
    m = GroupMember("m-1", "i-1", "c", "/10.0.0.1", (), metadata=sub, assignment_data=asg)
    got = member_json("consumer", m)
    assert got["subscription"] == {"version": 3, "topics": ["a", "b"],
                                   "owned_partitions": [{"topic": "a", "partitions": [2, 0]}],
                                   "generation_id": 4, "rack_id": "r1", "user_data": "01"}
    assert got["assignment"] == {"version": 0, "user_data": None,
                                 "partitions": [{"topic": "a", "partitions": [1]}, {"topic": "b", "partitions": [0, 3]}]}
    assert _tps_text(got["assignment"]["partitions"]) == "a:1;b:0,3"
    assert _tps_text(got["subscription"]["owned_partitions"]) == "a:0,2"

    other = member_json("connect", m)
    assert other["subscription"] == {"raw": sub.hex()} and other["assignment"] == {"raw": asg.hex()}
    broken = member_json("consumer", replace(m, metadata=b"\x00\x01\x00"))
    assert broken["subscription"]["raw"] == "000100" and broken["subscription"]["error"]
    empty = member_json("consumer", replace(m, metadata=b"", assignment_data=b""))
    assert empty["subscription"] is None and empty["assignment"] is None


def test_tables_plain_when_piped_rich_on_a_terminal():
    plain = io.StringIO()
    Out(plain).table(["topic", "partition", "isr"], [["a", 0, [1, 2]], ["bbb", 10, []]], right=("partition",))
    assert plain.getvalue() == ("TOPIC  PARTITION  ISR\n"
                                "a              0  1,2\n"
                                "bbb           10  -\n")
    tty = io.StringIO()
    Out(tty, tty=True, width=60).table(["topic", "partition"], [["a", 0]], title="partitions")
    text = tty.getvalue()
    assert "partitions" in text and "│" in text and "\x1b[" in text


def _usage(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return code, lines[0]


def test_usage_errors(capsys, monkeypatch):
    monkeypatch.delenv("KWIRE_BOOTSTRAP", raising=False)
    assert _usage(capsys, "metadata") == (2, "kwire metadata: give the brokers with -b HOST:PORT (or set $KWIRE_BOOTSTRAP)")
    assert _usage(capsys, "metadata", "-b", "h:1", "-X", "debug") == (2, "kwire metadata: -X takes KEY=VALUE, got 'debug'")
    code, line = _usage(capsys, "metadata", "-b", "h:1", "-X", "no.such.thing=1")
    assert code == 1 and "unknown configuration property 'no.such.thing'" in line
    code, line = _usage(capsys, "consume", "-b", "h:1", "-t", "t", "-g", "g", "-p", "0")
    assert code == 2 and "--partition is for reading without a group" in line
    code, line = _usage(capsys, "consume", "-b", "h:1", "-t", "t", "--offset", "-3")
    assert code == 2 and "--offset must be >= 0" in line
    code, line = _usage(capsys, "topics", "-b", "h:1", "--partitions", "3")
    assert code == 2 and "go with --create" in line
    code, line = _usage(capsys, "produce", "-b", "h:1", "-t", "t", "-k", ":", "--format", "json")
    assert code == 2 and "--key-delimiter" in line


def test_bootstrap_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("KWIRE_BOOTSTRAP", "127.0.0.1:1")
    code, line = _usage(capsys, "metadata")
    assert code == 1 and "127.0.0.1:1" in line


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("metadata", "topics", "groups", "offsets", "consume", "produce", "decode", "demo"):
        assert name in out
    with pytest.raises(SystemExit):
        main(["consume", "--help"])
    out = capsys.readouterr().out
    for flag in ("--bootstrap", "--topic", "--from-beginning", "--from-timestamp", "--offset", "--count",
                 "--group", "--idle-timeout", "--trace", "--trace-format", "-X"):
        assert flag in out


def test_commands_use_public_apis_and_nothing_imports_them():
    """kwire.commands sits at the top (beside cli): it uses the clients' public modules, and
    only kwire.cli imports it."""
    import ast
    from pathlib import Path

    import kwire

    root = Path(kwire.__file__).parent
    allowed = {"kwire.admin", "kwire.producer", "kwire.consumer", "kwire.records", "kwire.config",
               "kwire.errors", "kwire.net",
               "kwire.net.metadata", "kwire.protocol", "kwire.protocol.api", "kwire.protocol.schema",
               "kwire.protocol.error_codes", "kwire.debug.trace", "kwire.commands"}
    problems = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        inside = rel.parts[:2] == ("kwire", "commands")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = list(rel.parts[:-1]) if path.name != "__init__.py" else list(rel.parts[:-1])
                if node.level:
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
            elif isinstance(node, ast.Import):
                mod = ",".join(a.name for a in node.names)
            else:
                continue
            for m in mod.split(","):
                if inside and m.startswith("kwire") and not m.startswith("kwire.commands") and m not in allowed:
                    problems.append(f"{rel}: imports {m}")
                if not inside and m.startswith("kwire.commands") and rel.parts != ("kwire", "cli"):
                    problems.append(f"{rel}: imports {m}")
    assert not problems, "\n".join(problems)


def test_version_is_the_packages(capsys):
    """`kwire --version` prints kwire.__version__ (the installed wheel's metadata is checked
    against the same string in tests/test_packaging.py)."""
    import kwire

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"kwire {kwire.__version__}\n"
