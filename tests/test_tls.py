"""TLS: kwire's client through Python's ssl module (memory BIOs in the selectors loop).

Tansu 0.6.0 cannot terminate TLS itself: its ``--cert`` and ``--key`` options sit in one clap
argument group, so giving both is refused ("the argument '--cert <CERT>' cannot be used with
'--key <KEY>'"), and with either one alone it needs both to build a TLS config; besides, the
broker's accept loop never uses the acceptor it builds (``let _acceptor = ...`` in
tansu-broker/src/broker.rs at v0.6.0).  So a TLS-terminating proxy (tests/tcp_proxy.py, with a
server SSLContext from throwaway certificates) stands in front of Tansu, which advertises the
proxy: every byte kwire exchanges with the cluster crosses real TLS.
"""
from __future__ import annotations

import time

import pytest

import kwire
from kwire.consumer import Consumer, TopicPartition
from kwire.errors import (
    AuthenticationError,
    ConfigError,
    KafkaConnectionError,
    SslAuthenticationError,
)
from kwire.net import NetworkClient
from kwire.net.connection import ConnState

from .certs import TestCA
from .fake_broker import FakeBroker, ScramCredential, sasl_handler
from .tansu_util import ProxiedTansu
from .tcp_proxy import TcpProxy


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, other = TestCA(d, "kwire test CA"), TestCA(d, "some other CA")

    class P:
        pass
    P.ca, P.other = ca, other
    P.server = ca.issue("server", dns=["localhost"], ips=["127.0.0.1"])
    P.misnamed = ca.issue("misnamed", dns=["broker.example"])
    P.client = ca.issue("client", dns=["kwire-client"], client=True, key_password="k3y-pass")
    return P


@pytest.fixture(scope="module")
def tls_tansu(pki):
    with ProxiedTansu(tls=pki.ca.server_context(pki.server)) as t:
        yield t


def _tls(bootstrap, pki, **cfg):
    base = {"bootstrap.servers": bootstrap, "security.protocol": "ssl", "ssl.ca.location": pki.ca.pem,
            "reconnect.backoff.ms": 50}
    base.update(cfg)
    return base


def _md(v):
    return {"topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}


def test_producer_and_consumer_over_tls(tls_tansu, pki, unique_topic):
    cfg = _tls(tls_tansu.bootstrap, pki)
    admin = kwire.Admin(cfg)
    admin.create_topics([(unique_topic, 1, 1)], timeout=10, wait_for_leaders=True)
    admin.close()
    # values big enough that responses span many TLS records and several reads
    values = [bytes([i % 251]) * (20_000 + i) for i in range(120)]
    errors = []
    with kwire.Producer({**cfg, "linger.ms": 5}) as p:
        for v in values:
            p.produce(unique_topic, v, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(20) == 0
    assert not errors
    got = []
    with Consumer({**cfg, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(unique_topic, 0, 0)])
        end = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < end:
            got.extend(c.consume(100, timeout=0.2))
    assert [m.value() if callable(getattr(m, "value", None)) else m.value for m in got] == values


def test_hostname_is_verified_by_default(tls_tansu, pki):
    # the certificate names localhost and 127.0.0.1: both verify
    host, port = tls_tansu.bootstrap.rsplit(":", 1)
    for bootstrap in (tls_tansu.bootstrap, f"localhost:{port}"):
        with NetworkClient(_tls(bootstrap, pki), auto_metadata=False) as c:
            assert c.request(None, "Metadata", _md, 10_000)["brokers"]


def test_hostname_mismatch_is_a_typed_error_and_none_disables_it(pki, tansu):
    with TcpProxy("127.0.0.1", tansu.port, tls=pki.ca.server_context(pki.misnamed)) as proxy:
        with NetworkClient(_tls(proxy.address, pki), auto_metadata=False) as c:
            start = time.monotonic()
            with pytest.raises(SslAuthenticationError, match="(?i)hostname mismatch|doesn't match|not valid for"):
                c.ensure_ready(None, timeout_ms=10_000)
            f = c.send(None, "Metadata", _md, timeout_ms=10_000)
            c.wait(f)
            assert isinstance(f.error, SslAuthenticationError)
            assert time.monotonic() - start < 3
        cfg = _tls(proxy.address, pki, **{"ssl.endpoint.identification.algorithm": "none"})
        with NetworkClient(cfg, auto_metadata=False) as c:
            assert c.request(None, "Metadata", _md, 10_000)["brokers"]


def test_untrusted_ca_is_a_typed_error_not_retried(tls_tansu, pki):
    cfg = _tls(tls_tansu.bootstrap, pki, **{"ssl.ca.location": pki.other.pem})
    with NetworkClient(cfg, auto_metadata=False) as c:
        start = time.monotonic()
        with pytest.raises(SslAuthenticationError, match="certificate verify failed|did not verify") as info:
            c.ensure_ready(None, timeout_ms=10_000)
        assert isinstance(info.value, AuthenticationError)
        assert not isinstance(info.value, KafkaConnectionError)
        assert time.monotonic() - start < 3
        # requests waiting for any broker fail with it at once; the client keeps it for the
        # layers above (a producer waiting for metadata) to see
        f = c.send(None, "Metadata", _md, timeout_ms=20_000)
        c.wait(f)
        assert isinstance(f.error, SslAuthenticationError)
        assert isinstance(c.authentication_error, SslAuthenticationError)
        assert time.monotonic() - start < 3


def test_mutual_tls_with_an_encrypted_key(pki, tansu):
    server_ctx = pki.ca.server_context(pki.server, require_client_cert_from=pki.ca)
    with TcpProxy("127.0.0.1", tansu.port, tls=server_ctx) as proxy:
        with NetworkClient(_tls(proxy.address, pki), auto_metadata=False) as c:
            with pytest.raises(SslAuthenticationError):
                c.ensure_ready(None, timeout_ms=10_000)
        cfg = _tls(proxy.address, pki, **{"ssl.certificate.location": pki.client.cert,
                                          "ssl.key.location": pki.client.key,
                                          "ssl.key.password": "k3y-pass"})
        with NetworkClient(cfg, auto_metadata=False) as c:
            assert c.request(None, "Metadata", _md, 10_000)["brokers"]
        bad = dict(cfg, **{"ssl.key.password": "nope"})
        with pytest.raises(ConfigError, match="ssl.key.location") as info:
            NetworkClient(bad)
        assert "nope" not in str(info.value) and "k3y-pass" not in str(info.value)
    with pytest.raises(ConfigError, match="ssl.ca.location"):
        NetworkClient(_tls(proxy.address, pki, **{"ssl.ca.location": "/nonexistent/ca.pem"}))


def test_sasl_scram_over_tls(pki):
    holder = {}
    users = {"SCRAM-SHA-512": {"alice": ScramCredential("SCRAM-SHA-512", "s3cret")}}
    fb = FakeBroker(handler_factory=sasl_handler(lambda: holder["proxy"].port, scram_users=users))
    with fb, TcpProxy("127.0.0.1", fb.port, tls=pki.ca.server_context(pki.server)) as proxy:
        holder["proxy"] = proxy
        cfg = _tls(proxy.address, pki, **{"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                                          "sasl.username": "alice", "sasl.password": "s3cret"})
        states = []
        with NetworkClient(cfg, auto_metadata=False) as c:
            f = c.send(None, "Metadata", _md, timeout_ms=10_000)
            while not f.done:
                c.poll(5)
                states.append(c.connection_state(-1))
            assert f.result()["brokers"][0]["port"] == proxy.port
        assert ConnState.READY in states
        with NetworkClient(dict(cfg, **{"sasl.password": "wrong"}), auto_metadata=False) as c:
            with pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
                c.ensure_ready(None, timeout_ms=10_000)


def test_tls_client_against_a_plaintext_listener_fails_within_setup_timeout(peer, pki):
    cfg = _tls(peer.bootstrap, pki, **{"socket.connection.setup.timeout.ms": 1500})
    with NetworkClient(cfg, auto_metadata=False) as c:
        start = time.monotonic()
        with pytest.raises((KafkaConnectionError, SslAuthenticationError, kwire.errors.KafkaTimeoutError)):
            c.ensure_ready(-1, timeout_ms=5000)
        assert time.monotonic() - start < 5
