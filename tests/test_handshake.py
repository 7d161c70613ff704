"""Connection set-up without I/O: the ApiVersions negotiation (kwire.net.handshake) and the SASL
exchange (kwire.net.sasl_exchange), driven with hand-written answers.  The same exchanges run
against real peers in test_net, test_sasl and test_kafka_security."""
from __future__ import annotations

import random
import struct

import pytest

from kwire.errors import (
    AuthenticationError,
    BrokerError,
    KwireError,
    ProtocolError,
    TrailingBytesError,
    UnsupportedVersionError,
)
from kwire.net import sasl
from kwire.net.handshake import (
    API_VERSIONS,
    REAUTH_MARGIN_MS,
    REAUTH_SHARE,
    ApiVersionsNegotiation,
    choose_version,
    decode_body,
    reauth_at_ms,
)
from kwire.net.sasl_exchange import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslExchange
from kwire.protocol import api as P

PASSWORD = "pa55-w0rd,=é"
NEWEST = API_VERSIONS.max_version


def answer(api, version: int, body: dict, cid: int = 7) -> bytes:
    """A response payload as the client's frame reader hands it over: header and body."""
    return P.encode_response(api, version, body, correlation_id=cid, size_prefix=False)


def api_versions_ok(version: int, keys: dict[int, tuple[int, int]]) -> bytes:
    return answer(API_VERSIONS, version, {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in keys.items()]})


def unsupported_v0(apiversions_max: int | None) -> bytes:
    """KIP-511: UNSUPPORTED_VERSION in a v0 body listing the broker's ApiVersions range."""
    keys = [] if apiversions_max is None else [
        {"api_key": API_VERSIONS.key, "min_version": 0, "max_version": apiversions_max}]
    return answer(API_VERSIONS, 0, {"error_code": 35, "api_keys": keys})


# --- ApiVersions ----------------------------------------------------------------------------

def test_negotiation_asks_at_the_newest_version_and_learns_the_ranges():
    n = ApiVersionsNegotiation(3, client_software_version="9.9")
    req = n.request()
    assert (req.api.name, req.version, req.timeout_ms) == ("ApiVersions", NEWEST, None)
    assert req.body == {"client_software_name": "kwire", "client_software_version": "9.9"}
    step = n.on_answer(api_versions_ok(NEWEST, {18: (0, 4), 1: (4, 17)}))
    assert step.error is None and step.send is None
    assert step.api_versions == {18: (0, 4), 1: (4, 17)}
    assert step.body["error_code"] == 0 and len(step.body["api_keys"]) == 2


def test_kip511_retries_at_the_highest_version_the_broker_names():
    n = ApiVersionsNegotiation(1)
    step = n.on_answer(unsupported_v0(2))
    assert step.api_versions is None and step.error is None
    assert step.send is not None and step.send.version == 2 == n.version
    assert step.body["error_code"] == 35  # traced as it came
    step = n.on_answer(api_versions_ok(2, {18: (0, 2)}))
    assert step.api_versions == {18: (0, 2)}


def test_kip511_never_retries_at_the_same_or_a_newer_version():
    # A broker claiming more than we sent (it answered the error anyway): one step down.
    n = ApiVersionsNegotiation(1)
    step = n.on_answer(unsupported_v0(NEWEST + 5))
    assert step.send is not None and step.send.version == NEWEST - 1


def test_mock_cluster_error_body_that_is_not_v0_steps_down_one_version():
    # librdkafka's mock cluster (2.x): error code, then a one-byte array count and a throttle
    # time -- neither v0 nor flexible.  Header (correlation id) + that body.
    payload = struct.pack(">ihbi", 7, 35, 1, 0)
    n = ApiVersionsNegotiation(1)
    step = n.on_answer(payload)
    assert step.send is not None and step.send.version == NEWEST - 1
    assert step.body == {"error_code": 35, "api_keys": []}


def test_negotiation_gives_up_below_v0():
    n = ApiVersionsNegotiation(5)
    versions = []
    for _ in range(NEWEST + 2):  # bounded: a machine that never gives up fails, not hangs
        step = n.on_answer(unsupported_v0(None))
        if step.send is None:
            break
        versions.append(step.send.version)
    assert versions == list(range(NEWEST - 1, -1, -1))
    assert isinstance(step.error, ProtocolError) and "node 5" in str(step.error)


def test_other_apiversions_errors_are_the_brokers_error():
    n = ApiVersionsNegotiation(2)
    step = n.on_answer(answer(API_VERSIONS, NEWEST, {"error_code": 58, "api_keys": [], "throttle_time_ms": 0}))
    assert isinstance(step.error, BrokerError) and step.error.code == 58
    assert step.api_versions is None and step.send is None


def test_undecodable_apiversions_answer_raises():
    n = ApiVersionsNegotiation(2)
    with pytest.raises(KwireError):
        n.on_answer(api_versions_ok(NEWEST, {18: (0, 4)}) + b"\x01\x02")


def test_decode_body_tolerates_the_mock_clusters_zero_padding_only():
    md = P.api("Metadata")
    v = md.max_version
    good = answer(md, v, {"brokers": [], "topics": [], "controller_id": -1})
    assert decode_body(md, v, good + b"\x00")["controller_id"] == -1
    assert decode_body(md, v, good + b"\x00\x00")["controller_id"] == -1
    for bad in (good + b"\x00" * 3, good + b"\x01"):
        with pytest.raises(TrailingBytesError):
            decode_body(md, v, bad)
    with pytest.raises(TrailingBytesError):  # not flexible: no padding expected
        decode_body(API_VERSIONS, 0, unsupported_v0(2) + b"\x00")


def test_choose_version():
    produce = P.api("Produce")
    ranges = {produce.key: (0, 7)}
    pick = lambda *a, **kw: choose_version(ranges, produce, *a, node_id=1, address="h:1", **kw)  # noqa: E731
    assert pick(None) == 7
    assert pick(None, (None, 5)) == 5
    assert pick(6) == 6
    with pytest.raises(UnsupportedVersionError, match="not supported"):
        pick(produce.max_version)
    with pytest.raises(UnsupportedVersionError, match="no common"):
        pick(None, (8, None))
    with pytest.raises(UnsupportedVersionError, match="does not support Fetch"):
        choose_version(ranges, P.api("Fetch"), None, node_id=1, address="h:1")
    with pytest.raises(UnsupportedVersionError):
        choose_version(None, produce, None, node_id=1, address="h:1")


def test_reauth_time_is_85_to_90_percent_of_the_lifetime_from_the_request():
    rng = random.Random(1)
    assert reauth_at_ms(1_000, 0, rng) == 0  # no lifetime: never
    times = [reauth_at_ms(1_000, 10_000, rng) for _ in range(200)]
    assert all(1_000 + 10_000 * REAUTH_SHARE * 0.95 - 1 <= t <= 1_000 + 10_000 * REAUTH_SHARE for t in times)
    assert len(set(times)) > 10  # jittered


def test_reauth_leaves_a_second_of_a_short_session_or_a_quarter_of_a_shorter_one():
    """10% of a short lifetime is too little for a request written just before the renewal to
    reach a loaded broker: at least REAUTH_MARGIN_MS stays, and at most a quarter is given up
    (Kafka refuses a re-authentication within a second of the previous one)."""
    rng = random.Random(2)
    assert {reauth_at_ms(0, 5_000, rng) for _ in range(50)} == {5_000 - REAUTH_MARGIN_MS}
    assert {reauth_at_ms(0, 3_000, rng) for _ in range(50)} == {2_250}
    assert {reauth_at_ms(100, 2_000, rng) for _ in range(50)} == {100 + 1_500}
    # a lifetime of an hour: 85-90% as before
    assert all(3_600_000 * REAUTH_SHARE * 0.95 - 1 <= reauth_at_ms(0, 3_600_000, rng) <= 3_600_000 * REAUTH_SHARE
               for _ in range(50))


# --- SASL -------------------------------------------------------------------------------------

SASL_KEYS = {SASL_HANDSHAKE.key: (0, 1), SASL_AUTHENTICATE.key: (0, 2)}


def exchange(mech="PLAIN", password=PASSWORD, **kw) -> SaslExchange:
    return SaslExchange(lambda: sasl.new_mechanism(mech, "alice", password), "alice", node_id=4,
                        address="b:9093", security_protocol="sasl_plaintext", rng=random.Random(2), **kw)


def handshake_answer(code=0, mechanisms=("PLAIN",)):
    return answer(SASL_HANDSHAKE, 1, {"error_code": code, "mechanisms": list(mechanisms)})


def authenticate_answer(code=0, auth_bytes=b"", lifetime_ms=0, message=None, version=2):
    return answer(SASL_AUTHENTICATE, version, {"error_code": code, "error_message": message,
                                              "auth_bytes": auth_bytes, "session_lifetime_ms": lifetime_ms})


def test_sasl_needs_a_sasl_listener():
    ex = exchange()
    with pytest.raises(AuthenticationError, match="is it a SASL listener"):
        ex.start({18: (0, 4)})
    with pytest.raises(AuthenticationError):
        exchange().start({SASL_HANDSHAKE.key: (0, 0), SASL_AUTHENTICATE.key: (0, 2)})


def test_plain_exchange_and_session_lifetime():
    ex = exchange()
    req = ex.start(SASL_KEYS)
    assert (req.api.name, req.version, req.body, req.timeout_ms) == ("SaslHandshake", 1, {"mechanism": "PLAIN"}, None)
    step = ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(), sent_ms=0)
    assert step.error is None and step.send is not None
    assert (step.send.api.name, step.send.version) == ("SaslAuthenticate", 2)
    assert step.send.body == {"auth_bytes": b"\x00alice\x00" + PASSWORD.encode()}
    step = ex.on_answer(SASL_AUTHENTICATE.key, 2, authenticate_answer(lifetime_ms=60_000), sent_ms=500)
    assert step.authenticated and step.error is None and step.send is None
    assert step.session_lifetime_ms == 60_000
    assert 500 + 60_000 * REAUTH_SHARE * 0.95 <= step.reauth_at_ms <= 500 + 60_000 * REAUTH_SHARE


def test_plain_without_lifetime_never_reauthenticates():
    ex = exchange()
    ex.start(SASL_KEYS)
    ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(), sent_ms=0)
    step = ex.on_answer(SASL_AUTHENTICATE.key, 2, authenticate_answer(), sent_ms=500)
    assert step.authenticated and step.reauth_at_ms == 0


def test_reauthentication_handshake_gets_the_request_timeout():
    req = exchange(reauth=True, reauth_timeout_ms=30_000).start(SASL_KEYS)
    assert req.timeout_ms == 30_000


def test_mechanism_not_enabled_names_what_the_broker_offers():
    ex = exchange("SCRAM-SHA-256")
    ex.start(SASL_KEYS)
    step = ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(33, ("PLAIN", "GSSAPI")), sent_ms=0)
    assert isinstance(step.error, AuthenticationError)
    assert "SCRAM-SHA-256" in str(step.error) and "PLAIN, GSSAPI" in str(step.error)
    ex = exchange()
    ex.start(SASL_KEYS)
    step = ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(34), sent_ms=0)
    assert isinstance(step.error, AuthenticationError) and "refused SaslHandshake" in str(step.error)


def test_refused_password_is_an_authentication_error_without_the_password():
    ex = exchange()
    ex.start(SASL_KEYS)
    ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(), sent_ms=0)
    step = ex.on_answer(SASL_AUTHENTICATE.key, 2, authenticate_answer(58, message="bad credentials"), sent_ms=0)
    assert isinstance(step.error, AuthenticationError) and not step.authenticated
    text = str(step.error)
    assert "'alice'" in text and "bad credentials" in text and "node 4 (b:9093)" in text
    assert PASSWORD not in text


def test_scram_exchange_rfc7677(monkeypatch):
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: "rOprNGfwEbeRWgbNEkqO")
    ex = SaslExchange(lambda: sasl.new_mechanism("SCRAM-SHA-256", "user", "pencil"), "user", node_id=1,
                      address="b:1", security_protocol="sasl_ssl")
    ex.start({SASL_HANDSHAKE.key: (0, 1), SASL_AUTHENTICATE.key: (0, 1)})
    step = ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(0, ("SCRAM-SHA-256",)), sent_ms=0)
    assert step.send.version == 1 and step.send.body == {"auth_bytes": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"}
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    step = ex.on_answer(SASL_AUTHENTICATE.key, 1, authenticate_answer(auth_bytes=server_first, version=1), sent_ms=0)
    assert step.send.body["auth_bytes"].endswith(b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    forged = authenticate_answer(auth_bytes=b"v=" + b"A" * 44, version=1)
    bad = ex.on_answer(SASL_AUTHENTICATE.key, 1, forged, sent_ms=0)
    assert isinstance(bad.error, AuthenticationError) and "does not verify" in str(bad.error)
    assert "pencil" not in str(bad.error)


def test_scram_exchange_completes_on_the_server_signature(monkeypatch):
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: "rOprNGfwEbeRWgbNEkqO")
    ex = SaslExchange(lambda: sasl.new_mechanism("SCRAM-SHA-256", "user", "pencil"), "user", node_id=1,
                      address="b:1", security_protocol="sasl_ssl")
    ex.start({SASL_HANDSHAKE.key: (0, 1), SASL_AUTHENTICATE.key: (0, 1)})
    ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(0, ("SCRAM-SHA-256",)), sent_ms=0)
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    ex.on_answer(SASL_AUTHENTICATE.key, 1, authenticate_answer(auth_bytes=server_first, version=1), sent_ms=0)
    final = authenticate_answer(auth_bytes=b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", version=1)
    step = ex.on_answer(SASL_AUTHENTICATE.key, 1, final, sent_ms=0)
    assert step.authenticated and step.error is None and step.reauth_at_ms == 0


def test_no_credentials_in_reprs():
    ex = exchange()
    req = ex.start(SASL_KEYS)
    step = ex.on_answer(SASL_HANDSHAKE.key, 1, handshake_answer(), sent_ms=0)
    for obj in (ex, req, step, step.send, ex.mechanism):
        text = repr(obj)
        assert PASSWORD not in text and "alice" not in text, text
