"""TLS and SASL against Apache Kafka 4.3 itself (issue 12, "What only a real broker can show").

One Kafka node with SSL, SASL_PLAINTEXT and SASL_SSL listeners, a CA and certificates made here
(SANs localhost / 127.0.0.1), SCRAM users created at format time; a second node serves the bad
certificates (expired on its SSL listener, misnamed on its SASL_SSL listener) so that each TLS
failure has exactly one cause.

Where Kafka's behaviour differs from the stand-ins (Tansu 0.6 behind a TLS proxy in
tests/test_tls.py, the fake broker and Tansu in tests/test_sasl.py):

* Kafka terminates TLS itself (Java's SSLEngine) and asks for the client certificate per
  listener (``listener.name.ssl.ssl.client.auth=required``).  With TLS 1.3 it refuses a client
  without a certificate only after the client's side of the handshake is done: kwire sees the
  alert on its first read, not in the handshake, and must still report SslAuthenticationError.
* A wrong PLAIN or SCRAM password: Kafka answers SaslAuthenticate with
  SASL_AUTHENTICATION_FAILED (58) and an error message, then closes the connection; Tansu (rsasl)
  sends an ``e=`` server-final message with error code 0.  Kafka never says which of user or
  password was wrong.
* KIP-368: Kafka gives the SASL session a lifetime (``connections.max.reauth.ms``, per listener
  and mechanism) in SaslAuthenticate v1+ ``session_lifetime_ms`` of the exchange's last answer
  (SCRAM's server-first answer says 0), closes a connection whose
  session expired on its next request that is not a SaslHandshake, and accepts a re-authentication
  (SaslHandshake + SaslAuthenticate on the same connection) at most once a second.  Tansu gives no
  lifetime; the fake gives one when asked.  kwire re-authenticates in band before expiry.
"""
from __future__ import annotations

import logging
import re
import time
import uuid

import pytest

from kwire.consumer import Consumer, TopicPartition
from kwire.errors import AuthenticationError, KafkaConnectionError, SslAuthenticationError
from kwire.net import NetworkClient
from kwire.producer import Producer

from .certs import TestCA
from .kafka_util import start_kafka, stop_kafka

# Credentials distinctive enough to search for in captured output.
PLAIN_PASSWORD = "pl41n-Pa55word-QX"
SCRAM_PASSWORDS = {"SCRAM-SHA-256": "scr4m256-Pa55word-QX", "SCRAM-SHA-512": "scr4m512-Pa55word-QX"}
KEY_PASSWORD = "cl13nt-key-Pa55-QX"
PASSWORDS = {"PLAIN": PLAIN_PASSWORD, **SCRAM_PASSWORDS}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
REAUTH_MS = 3000  # connections.max.reauth.ms on the SASL_PLAINTEXT listener

_PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               f'user_alice="{PLAIN_PASSWORD}";')
_SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def _sasl_properties(listener: str) -> dict[str, str]:
    return {f"listener.name.{listener}.plain.sasl.jaas.config": _PLAIN_JAAS,
            f"listener.name.{listener}.scram-sha-256.sasl.jaas.config": _SCRAM_JAAS,
            f"listener.name.{listener}.scram-sha-512.sasl.jaas.config": _SCRAM_JAAS}


def _tls_properties(listener: str, keystore: str, truststore: str | None = None) -> dict[str, str]:
    props = {f"listener.name.{listener}.ssl.keystore.type": "PEM",
             f"listener.name.{listener}.ssl.keystore.location": keystore}
    if truststore is not None:  # mutual TLS
        props.update({f"listener.name.{listener}.ssl.truststore.type": "PEM",
                      f"listener.name.{listener}.ssl.truststore.location": truststore,
                      f"listener.name.{listener}.ssl.client.auth": "required"})
    return props


class Pki:
    def __init__(self, d):
        self.ca, self.other = TestCA(d, "kwire kafka CA"), TestCA(d, "some other CA")
        self.server = self.ca.issue("server", dns=["localhost"], ips=["127.0.0.1"])
        self.expired = self.ca.issue("expired", dns=["localhost"], ips=["127.0.0.1"], expired=True)
        self.misnamed = self.ca.issue("misnamed", dns=["broker.example"])
        self.client = self.ca.issue("client", dns=["kwire-client"], client=True, key_password=KEY_PASSWORD)
        self.stranger = self.other.issue("stranger", dns=["kwire-client"], client=True)
        self.keystore = self.ca.pem_keystore(self.server, d / "server-keystore.pem")
        self.expired_keystore = self.ca.pem_keystore(self.expired, d / "expired-keystore.pem")
        self.misnamed_keystore = self.ca.pem_keystore(self.misnamed, d / "misnamed-keystore.pem")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("kafka-pki"))


@pytest.fixture(scope="module")
def kafka(request, pki):
    """SSL (mutual TLS required), SASL_PLAINTEXT (sessions of REAUTH_MS) and SASL_SSL."""
    props = {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        **_sasl_properties("sasl_plaintext"), **_sasl_properties("sasl_ssl"),
        **_tls_properties("ssl", pki.keystore, truststore=pki.ca.pem),
        **_tls_properties("sasl_ssl", pki.keystore),
        **{f"listener.name.sasl_plaintext.{m.lower()}.connections.max.reauth.ms": str(REAUTH_MS)
           for m in MECHANISMS},
    }
    users = [(m, "alice", p) for m, p in SCRAM_PASSWORDS.items()]
    cluster = start_kafka(request, 1, listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"), properties=props,
                          scram_users=users)
    yield cluster
    stop_kafka(request, cluster)


@pytest.fixture(scope="module")
def bad_certs_kafka(request, pki):
    """A second node: an expired certificate on SSL, a misnamed one on SASL_SSL."""
    props = {"sasl.enabled.mechanisms": "PLAIN", **_sasl_properties("sasl_ssl"),
             **_tls_properties("ssl", pki.expired_keystore),
             **_tls_properties("sasl_ssl", pki.misnamed_keystore)}
    cluster = start_kafka(request, 1, listeners=("SSL", "SASL_SSL"), properties=props, heap_mb=256)
    yield cluster
    stop_kafka(request, cluster)


# --- helpers ----------------------------------------------------------------------------------

def _md(v):
    return {"topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}


def _ssl(bootstrap: str, pki: Pki, **cfg) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "ssl", "ssl.ca.location": pki.ca.pem,
            "ssl.certificate.location": pki.client.cert, "ssl.key.location": pki.client.key,
            "ssl.key.password": KEY_PASSWORD, "reconnect.backoff.ms": 50, **cfg}


def _sasl(kafka, listener: str, mech: str, pki: Pki, password: str | None = None, **cfg) -> dict:
    out = {"bootstrap.servers": kafka.address(listener), "security.protocol": listener.lower(),
           "sasl.mechanism": mech, "sasl.username": "alice",
           "sasl.password": PASSWORDS[mech] if password is None else password, "reconnect.backoff.ms": 50}
    if listener == "SASL_SSL":
        out["ssl.ca.location"] = pki.ca.pem
    out.update(cfg)
    return out


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _roundtrip(cfg: dict, topic: str, n: int = 50, *, tracer=None) -> list[bytes]:
    """Produce ``n`` records with kwire's Producer, read them back with kwire's Consumer."""
    values = [f"{topic}-{i}".encode() * (1 + i % 7) for i in range(n)]
    errors = []
    with Producer({**cfg, "linger.ms": 5}, tracer=tracer) as p:
        for v in values:
            p.produce(topic, v, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(30) == 0
    assert not errors
    got = []
    with Consumer({**cfg, "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}, tracer=tracer) as c:
        c.assign([TopicPartition(topic, 0, 0)])
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            got.extend(m.value for m in c.consume(100, timeout=0.2))
    assert got == values
    return got


def _fails_at_once(cfg: dict, error=SslAuthenticationError, match: str | None = None) -> AuthenticationError:
    """Connecting fails with ``error`` within 3 s, and a request waiting for any broker fails
    with it too (not with a timeout at its 20 s deadline)."""
    with NetworkClient(cfg, auto_metadata=False) as c:
        start = time.monotonic()
        with pytest.raises(error) as info:
            c.ensure_ready(None, timeout_ms=15_000)
        f = c.send(None, "Metadata", _md, timeout_ms=20_000)
        c.wait(f)
        assert time.monotonic() - start < 3
    assert isinstance(f.error, error), f.error
    assert not isinstance(info.value, KafkaConnectionError)
    if match is not None:
        assert re.search(match, str(info.value)), str(info.value)
    return info.value


# --- TLS ---------------------------------------------------------------------------------------

def test_mutual_tls_with_an_encrypted_client_key(kafka, pki):
    """SSL listener with ssl.client.auth=required: CA verification and hostname check on
    (bootstrap by DNS name, then the advertised 127.0.0.1), the client key PKCS#8-encrypted."""
    assert b"ENCRYPTED PRIVATE KEY" in open(pki.client.key, "rb").read()
    port = kafka.address("SSL").rsplit(":", 1)[1]
    cfg = _ssl(f"localhost:{port}", pki)
    with NetworkClient(cfg, auto_metadata=False) as c:
        assert c._ssl_context.check_hostname and c._ssl_context.verify_mode.name == "CERT_REQUIRED"
    _roundtrip(cfg, _topic("mtls"))


def test_mutual_tls_refuses_a_client_without_or_with_a_foreign_certificate(kafka, pki):
    base = _ssl(kafka.address("SSL"), pki)
    anonymous = {k: v for k, v in base.items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    err = _fails_at_once(anonymous)
    assert "refused" in str(err) or "handshake" in str(err)
    foreign = {**anonymous, "ssl.certificate.location": pki.stranger.cert, "ssl.key.location": pki.stranger.key}
    _fails_at_once(foreign)


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_wrong_ca_fails_at_once(kafka, pki, listener):
    cfg = _ssl(kafka.address(listener), pki, **{"ssl.ca.location": pki.other.pem})
    if listener == "SASL_SSL":
        cfg.update({"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                    "sasl.password": PLAIN_PASSWORD})
    _fails_at_once(cfg, match="certificate verify failed|did not verify")


def test_wrong_hostname_fails_at_once_and_only_the_name_is_wrong(bad_certs_kafka, pki):
    """The SASL_SSL listener of the second node presents a certificate for broker.example."""
    cfg = {"bootstrap.servers": bad_certs_kafka.address("SASL_SSL"), "security.protocol": "sasl_ssl",
           "ssl.ca.location": pki.ca.pem, "sasl.mechanism": "PLAIN", "sasl.username": "alice",
           "sasl.password": PLAIN_PASSWORD, "reconnect.backoff.ms": 50}
    _fails_at_once(cfg, match="(?i)hostname mismatch|doesn't match|not valid for")
    # the same certificate, CA verified, without the name check: the connection works
    with NetworkClient({**cfg, "ssl.endpoint.identification.algorithm": "none"}, auto_metadata=False) as c:
        assert c.request(None, "Metadata", _md, 15_000)["brokers"]


def test_expired_server_certificate_fails_at_once(bad_certs_kafka, pki):
    """The SSL listener of the second node presents a certificate that expired a day ago."""
    cfg = {"bootstrap.servers": bad_certs_kafka.address("SSL"), "security.protocol": "ssl",
           "ssl.ca.location": pki.ca.pem, "reconnect.backoff.ms": 50}
    _fails_at_once(cfg, match="(?i)expired")
    # nothing else is wrong with it: without verification the broker answers
    with NetworkClient({**cfg, "enable.ssl.certificate.verification": False}, auto_metadata=False) as c:
        assert c.request(None, "Metadata", _md, 15_000)["brokers"]


# --- SASL --------------------------------------------------------------------------------------

@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mech", MECHANISMS)
def test_sasl_consume_and_produce(kafka, pki, listener, mech):
    events = []
    _roundtrip(_sasl(kafka, listener, mech, pki), _topic(f"sasl-{mech.lower()}"), tracer=events.append)
    handshakes = [e for e in events if e["api"] == "SaslHandshake" and e["direction"] == "send"]
    assert handshakes and all(e["body"]["mechanism"] == mech for e in handshakes)
    auth = [e for e in events if e["api"] == "SaslAuthenticate" and e["direction"] == "recv"]
    assert auth and all(e["body"]["error_code"] == 0 for e in auth)
    # connections.max.reauth.ms is set on SASL_PLAINTEXT only; elsewhere Kafka says 0 (none).
    # Kafka gives the lifetime in the exchange's last SaslAuthenticate (SCRAM's first answer: 0).
    lifetimes = {e["body"]["session_lifetime_ms"] for e in auth}
    assert max(lifetimes) == (REAUTH_MS if listener == "SASL_PLAINTEXT" else 0), lifetimes


def _failed_auth_lines(kafka, since: int) -> list[str]:
    text = (kafka.nodes[kafka.nodes_ids[0]].log_dir / "server.log").read_text(errors="replace")[since:]
    return [line for line in text.splitlines() if "Failed authentication" in line]


def _log_size(kafka) -> int:
    return len((kafka.nodes[kafka.nodes_ids[0]].log_dir / "server.log").read_text(errors="replace"))


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mech", MECHANISMS)
def test_wrong_password_fails_at_once_without_a_retry_storm(kafka, pki, listener, mech):
    """A NetworkClient, a Producer and a Consumer with a wrong password: each fails with
    AuthenticationError within seconds; the broker sees a handful of attempts, not a storm."""
    events = []
    cfg = _sasl(kafka, listener, mech, pki, password="not-" + PASSWORDS[mech])
    since = _log_size(kafka)
    err = _fails_at_once(cfg, error=AuthenticationError)
    assert not isinstance(err, SslAuthenticationError)
    assert "alice" in str(err) and "SASL_AUTHENTICATION_FAILED" in str(err), str(err)

    # a Producer: the record fails at once with the typed error, not at its delivery timeout
    delivered = []
    with Producer({**cfg, "message.timeout.ms": 20_000}, tracer=events.append) as p:
        start = time.monotonic()
        p.produce(_topic("denied"), b"x", partition=0, on_delivery=lambda e, m: delivered.append(e))
        p.flush(10)
        assert time.monotonic() - start < 3
    assert len(delivered) == 1 and isinstance(delivered[0], AuthenticationError), delivered

    # a Consumer polled for 3 s
    with Consumer({**cfg, "auto.offset.reset": "earliest"}, tracer=events.append) as c:
        c.assign([TopicPartition(_topic("denied"), 0, 0)])
        start = time.monotonic()
        with pytest.raises(AuthenticationError):
            while time.monotonic() - start < 3:
                c.consume(10, timeout=0.2)
        assert time.monotonic() - start < 3

    attempts = [e for e in events if e["api"] == "SaslHandshake" and e["direction"] == "send"]
    assert 2 <= len(attempts) <= 6, len(attempts)
    time.sleep(0.5)  # the broker logs after closing
    # the broker's own count: one failed authentication per attempt we traced, plus _fails_at_once's
    failed = _failed_auth_lines(kafka, since)
    assert len(attempts) + 1 <= len(failed) <= len(attempts) + 3, failed


def test_credentials_never_appear_in_traces_logs_or_reprs(kafka, pki, caplog, capfd):
    """Every mechanism, right and wrong passwords, over SASL_SSL with ``debug=protocol``, plus
    mutual TLS with a key password: the tracer's events, kwire's log records, stdout/stderr,
    the errors and the reprs of clients and configurations carry no secret."""
    caplog.set_level(logging.DEBUG, logger="kwire")
    events, texts = [], []
    for mech in MECHANISMS:
        for password in (PASSWORDS[mech], "wrong-" + PASSWORDS[mech]):
            cfg = _sasl(kafka, "SASL_SSL", mech, pki, password=password, debug="protocol")
            with NetworkClient(cfg, tracer=events.append) as c:
                texts += [repr(c), repr(c.config)]
                try:
                    c.request(None, "Metadata", _md, 15_000)
                except AuthenticationError as exc:
                    texts += [str(exc), repr(exc)]
    cfg = _sasl(kafka, "SASL_SSL", "SCRAM-SHA-512", pki, debug="protocol")
    topic = _topic("secrets")
    with Producer(cfg, tracer=events.append) as p:
        p.produce(topic, b"v", partition=0)
        assert p.flush(30) == 0
        texts.append(repr(p))
    with Consumer({**cfg, "auto.offset.reset": "earliest"}, tracer=events.append) as c:
        c.assign([TopicPartition(topic, 0, 0)])
        end = time.monotonic() + 20
        while not c.consume(1, timeout=0.2) and time.monotonic() < end:
            pass
        texts.append(repr(c))
    with NetworkClient(_ssl(kafka.address("SSL"), pki, debug="protocol"), tracer=events.append) as c:
        assert c.request(None, "Metadata", _md, 15_000)["brokers"]
        texts += [repr(c), repr(c.config)]
    try:
        NetworkClient(_ssl(kafka.address("SSL"), pki, **{"ssl.key.password": "wrong-" + KEY_PASSWORD}))
    except Exception as exc:  # a ConfigError naming the files, not the password
        texts += [str(exc), repr(exc)]
    else:
        raise AssertionError("a wrong ssl.key.password must not load the key")

    sasl_events = [e for e in events if e["api"] == "SaslAuthenticate"]
    assert len(sasl_events) >= 12 and all(e["body"]["auth_bytes"] == "<redacted>" for e in sasl_events)
    out, err = capfd.readouterr()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "SaslAuthenticate" in logged  # the frames were logged at DEBUG, their secrets not
    everything = "\n".join([repr(events), logged, out, err, *texts])
    secrets = [*PASSWORDS.values(), KEY_PASSWORD]
    secrets += [s.encode().hex() for s in secrets] + ["c=biws", "n,,n=alice", "YWxpY2U"]  # base64 of "alice"
    for secret in secrets:
        assert secret not in everything, secret


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-512"])
def test_reauthentication_is_ridden_out_without_a_gap(kafka, pki, mech):
    """SASL_PLAINTEXT sessions last REAUTH_MS: a producer and a consumer run for four session
    lifetimes, one record every ~20 ms.  Every record arrives, in order, none later than a
    second after the previous one; both clients re-authenticate in band (SaslHandshake on the
    same connections: no new ApiVersions, i.e. no reconnect) and nothing fails."""
    cfg = _sasl(kafka, "SASL_PLAINTEXT", mech, pki)
    topic = _topic(f"reauth-{mech.lower()}")
    events, errors, got = [], [], []
    ccfg = {**cfg, "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}
    with Producer({**cfg, "linger.ms": 0}, tracer=events.append) as p, \
            Consumer(ccfg, tracer=events.append) as c:
        p.produce(topic, b"warm-up", partition=0)
        assert p.flush(30) == 0
        c.assign([TopicPartition(topic, 0, 0)])
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            got.extend(m.value for m in c.consume(10, timeout=0.2))
        assert got == [b"warm-up"]

        def kinds(api):
            return sum(1 for e in list(events) if e["api"] == api and e["direction"] == "send")
        connections, handshakes = kinds("ApiVersions"), kinds("SaslHandshake")
        sent, max_gap_s = [], 0.0
        last = time.monotonic()
        end = last + 4 * REAUTH_MS / 1000
        i = 0
        while time.monotonic() < end or (len(got) - 1 < len(sent) and time.monotonic() < end + 10):
            if time.monotonic() < end:
                v = b"r%d" % i
                i += 1
                p.produce(topic, v, partition=0, on_delivery=lambda e, m: e and errors.append(e))
                sent.append(v)
            # kwire's Producer is driven by its caller (poll/flush): keep polling after the last
            # produce, or a batch held during a renewal waits for flush()
            p.poll(0)
            batch = c.consume(100, timeout=0.02)
            now = time.monotonic()
            if batch:
                max_gap_s = max(max_gap_s, now - last)
                last = now
                got.extend(m.value for m in batch)
        assert p.flush(10) == 0
        assert not errors
        assert got[1:] == sent
        assert max_gap_s < 1.0, max_gap_s
        assert kinds("ApiVersions") == connections  # no reconnect
        # at least three renewals on the producer's and the consumer's connections each
        assert kinds("SaslHandshake") - handshakes >= 6, kinds("SaslHandshake") - handshakes
