"""kwire.config: one table of properties; parse_config checks keys and values."""
import pytest

from kwire.config import PROPERTIES, Config, lookup, parse_config, render_markdown
from kwire.errors import ConfigError


def test_defaults_and_attribute_access():
    cfg = parse_config({"bootstrap.servers": "a:1,b:2", "group.id": "g"})
    assert isinstance(cfg, Config)
    assert cfg.bootstrap_servers == ["a:1", "b:2"]
    assert cfg["session.timeout.ms"] == cfg.session_timeout_ms == 45000
    assert cfg.enable_auto_commit is True
    assert cfg.auto_offset_reset == "latest"
    assert cfg.partition_assignment_strategy == ["range", "roundrobin"]
    assert cfg.user == {"bootstrap.servers": ["a:1", "b:2"], "group.id": "g"}
    with pytest.raises(AttributeError):
        _ = cfg.no_such_thing
    with pytest.raises(AttributeError):
        cfg.linger_ms = 3  # read-only


def test_producer_defaults():
    cfg = parse_config({"bootstrap.servers": "a:1"}, role="producer")
    assert cfg.acks == "all" and cfg.linger_ms == 5 and cfg.compression_type == "none"
    assert cfg.partitioner == "murmur2_random"
    assert cfg.group_id is None  # other roles' properties read as their defaults


@pytest.mark.parametrize("raw,expected", [
    ("true", True), ("1", True), ("TRUE", True), ("yes", True), (1, True), (True, True),
    ("false", False), ("0", False), ("off", False), (0, False), (False, False),
])
def test_boolean_coercion(raw, expected):
    assert parse_config({"enable.auto.commit": raw}).enable_auto_commit is expected


def test_number_and_list_coercion():
    cfg = parse_config({"fetch.max.bytes": "1000", "partition.assignment.strategy": "cooperative-sticky",
                        "debug": "protocol,fetch"})
    assert cfg.fetch_max_bytes == 1000
    assert cfg.partition_assignment_strategy == ["cooperative-sticky"]
    assert cfg.debug == ["protocol", "fetch"] and cfg.debug_enabled("protocol")


@pytest.mark.parametrize("alias,canonical", [
    ("smallest", "earliest"), ("beginning", "earliest"), ("largest", "latest"), ("end", "latest"),
    ("earliest", "earliest"), ("LATEST", "latest"), ("error", "error"), ("none", "error"),
])
def test_auto_offset_reset_aliases(alias, canonical):
    assert parse_config({"auto.offset.reset": alias}).auto_offset_reset == canonical


def test_property_aliases():
    cfg = parse_config({"compression.codec": "lz4", "message.timeout.ms": 1000, "acks": -1,
                        "metadata.broker.list": "h:1"}, role="producer")
    assert cfg.compression_type == "lz4" and cfg["compression.codec"] == "lz4"
    assert cfg.delivery_timeout_ms == 1000 and cfg.acks == "all" and cfg.bootstrap_servers == ["h:1"]
    assert parse_config({"acks": 1}, role="producer").acks == "1"
    assert parse_config({"acks": "0"}, role="producer").acks == "0"


def test_unknown_key_names_the_key():
    with pytest.raises(ConfigError, match="'no.such.key'"):
        parse_config({"bootstrap.servers": "a:1", "no.such.key": 1})
    with pytest.raises(ConfigError, match="no.such"):
        parse_config(no_such=1)


@pytest.mark.parametrize("key,value,why", [
    ("session.timeout.ms", "soon", "integer"),
    ("session.timeout.ms", 1.5, "integer"),
    ("session.timeout.ms", True, "integer"),
    ("session.timeout.ms", 0, "minimum"),
    ("fetch.max.bytes", 2**40, "maximum"),
    ("enable.auto.commit", "maybe", "boolean"),
    ("enable.auto.commit", 2, "boolean"),
    ("auto.offset.reset", "middle", "earliest"),
    ("isolation.level", "dirty", "read_committed"),
    ("partition.assignment.strategy", "range,sticky", "'sticky'"),
    ("compression.type", "brotli", "zstd"),
    ("acks", 2, "all"),
    ("client.id", 42, "string"),
    ("bootstrap.servers", 5, "comma-separated"),
    ("debug", "everything", "'everything'"),
    ("on_delivery", "not callable", "callable"),
])
def test_bad_values_name_the_key(key, value, why):
    role = "producer" if key in ("compression.type", "acks", "on_delivery") else "consumer"
    with pytest.raises(ConfigError) as info:
        parse_config({key: value}, role=role)
    assert repr(key) in str(info.value) and why in str(info.value)


def test_unsupported_features_are_config_errors():
    for proto in ("SSL", "sasl_plaintext", "SASL_SSL", "PLAINTEXT"):
        assert parse_config({"security.protocol": proto}).security_protocol == proto.lower()
    with pytest.raises(ConfigError, match="security.protocol"):
        parse_config({"security.protocol": "tls"})
    with pytest.raises(ConfigError, match="enable.idempotence"):  # needs acks=all
        parse_config({"enable.idempotence": True, "acks": "1"}, role="producer")


def test_heartbeat_must_be_below_session_timeout():
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        parse_config({"session.timeout.ms": 6000, "heartbeat.interval.ms": 6000})


def test_other_roles_properties_are_accepted_and_ignored():
    cfg = parse_config({"linger.ms": 10})  # librdkafka warns and ignores; so do we
    assert cfg.user["linger.ms"] == 10


def test_replace_and_kwargs():
    cfg = parse_config(bootstrap_servers="a:1", group_id="g")
    cfg2 = cfg.replace(**{"group.id": "h"})
    assert cfg2.group_id == "h" and cfg.group_id == "g"
    assert parse_config(cfg).group_id == "g"


def test_table_is_consistent():
    names = set()
    for p in PROPERTIES:
        for n in (p.name, *p.aliases):
            assert n not in names, n
            names.add(n)
            assert lookup(n) is p
        assert p.doc.strip()
        if p.type in ("int",):
            assert p.min is not None and p.max is not None and p.min <= p.default <= p.max, p.name
        if p.type == "enum":
            assert p.default in p.choices, p.name
    required = """bootstrap.servers client.id group.id group.instance.id session.timeout.ms
        heartbeat.interval.ms max.poll.interval.ms partition.assignment.strategy enable.auto.commit
        auto.commit.interval.ms auto.offset.reset isolation.level fetch.min.bytes fetch.wait.max.ms
        fetch.max.bytes max.partition.fetch.bytes queued.max.messages.kbytes check.crcs
        socket.timeout.ms request.timeout.ms socket.connection.setup.timeout.ms reconnect.backoff.ms
        reconnect.backoff.max.ms retry.backoff.ms metadata.max.age.ms receive.message.max.bytes debug
        security.protocol enable.partition.eof client.rack acks linger.ms batch.size
        batch.num.messages compression.type compression.codec message.max.bytes retries
        delivery.timeout.ms""".split()
    assert not [n for n in required if n not in names]


def test_docs_config_md_is_current():
    from pathlib import Path
    doc = Path(__file__).parent.parent / "docs" / "CONFIG.md"
    assert doc.read_text() == render_markdown() + "\n", "regenerate: python -m kwire.config > docs/CONFIG.md"
