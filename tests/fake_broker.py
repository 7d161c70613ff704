"""A scripted broker for tests of the network layer's edge cases.

``handler(api_key, version, correlation_id, body) -> bytes | None`` returns the complete
response frame to send (use :func:`frame`), or None to stay silent, or an iterable of pieces
sent one after the other (a generator may sleep between them: a slow or dripping answer).  The default handler
answers ApiVersions (listing Metadata and ApiVersions) and nothing else.  A handler with state
per connection (a SASL exchange) comes from ``handler_factory()``, called once per connection.

:class:`ScramServer` and :func:`sasl_handler` play the broker's side of SASL (PLAIN and
SCRAM-SHA-256/512, RFC 5802/7677), written independently of kwire's client so each checks
the other (and librdkafka checks both: see tests/test_sasl.py).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import struct
import threading
import time

from kwire.protocol import api as P

API_KEYS = [{"api_key": 18, "min_version": 0, "max_version": 4},
            {"api_key": 3, "min_version": 0, "max_version": 12}]


def frame(api, version: int, correlation_id: int, body: dict) -> bytes:
    return P.encode_response(api, version, body, correlation_id=correlation_id)


def api_versions_ok(version: int, correlation_id: int, api_keys=API_KEYS) -> bytes:
    return frame("ApiVersions", version, correlation_id,
                 {"error_code": 0, "api_keys": api_keys, "throttle_time_ms": 0})


class FakeBroker:
    def __init__(self, handler=None, *, handler_factory=None):
        self.handler = handler or (lambda key, v, cid, body: api_versions_ok(v, cid) if key == 18 else None)
        self.handler_factory = handler_factory
        self.requests: list[tuple[int, int, int]] = []  # (api_key, version, correlation_id)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.port = self._listener.getsockname()[1]
        self.connections = 0
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self._socks.append(sock)
            threading.Thread(target=self._conn, args=(sock,), daemon=True).start()

    def _conn(self, sock: socket.socket) -> None:
        handler = self.handler_factory() if self.handler_factory is not None else self.handler
        try:
            while True:
                head = _recv_exact(sock, 4)
                if head is None:
                    return
                payload = _recv_exact(sock, struct.unpack(">i", head)[0])
                if payload is None:
                    return
                key, version, cid = P.peek_request_header(payload)
                self.requests.append((key, version, cid))
                try:
                    body = P.decode_request(payload, size_prefix=False).body
                except Exception:
                    body = None
                out = handler(key, version, cid, body)
                if isinstance(out, (bytes, bytearray)):
                    if out:
                        sock.sendall(out)
                elif out is not None:  # an iterable of pieces (it may sleep between them)
                    for piece in out:
                        sock.sendall(piece)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self._listener.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


# --- the broker's side of SASL --------------------------------------------------------------

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramCredential:
    """What a broker stores for a SCRAM user: salt, iterations, StoredKey, ServerKey (never the
    password)."""

    def __init__(self, mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = 4096):
        h = _HASHES[mechanism]
        self.hash = h
        self.salt = salt if salt is not None else secrets.token_bytes(16)
        self.iterations = iterations
        salted = hashlib.pbkdf2_hmac(h, password.encode(), self.salt, iterations)
        self.stored_key = hashlib.new(h, hmac.new(salted, b"Client Key", h).digest()).digest()
        self.server_key = hmac.new(salted, b"Server Key", h).digest()


class ScramServer:
    """One SCRAM exchange, server side.  ``step(client_message) -> (server_message, outcome)``
    with outcome None (go on), "ok" or an error string."""

    def __init__(self, mechanism: str, users: dict, *, server_nonce: str | None = None,
                 tamper_signature: bool = False):
        self.mechanism = mechanism
        self.users = users  # name -> ScramCredential
        self.server_nonce = server_nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self.tamper_signature = tamper_signature
        self.state = "first"
        self.user: str | None = None

    def step(self, msg: bytes):
        text = msg.decode()
        if self.state == "first":
            gs2, _, bare = text.partition(",,")  # "n,," then the bare message (no authzid)
            if gs2 != "n":
                return b"e=channel-binding-not-supported", "channel binding"
            attrs = dict(kv.split("=", 1) for kv in bare.split(","))
            self.user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
            cred = self.users.get(self.user)
            # an unknown user still gets a salt: do not reveal who exists (RFC 5802 section 5.1)
            salt = cred.salt if cred else b"fake-salt-16byte"
            iterations = cred.iterations if cred else 4096
            self.nonce = attrs["r"] + self.server_nonce
            self.server_first = f"r={self.nonce},s={base64.b64encode(salt).decode()},i={iterations}"
            self.client_first_bare = bare
            self.state = "final"
            return self.server_first.encode(), None
        if self.state == "final":
            self.state = "done"
            without_proof, _, proof_b64 = text.rpartition(",p=")
            attrs = dict(kv.split("=", 1) for kv in without_proof.split(","))
            cred = self.users.get(self.user)
            if cred is None:
                return b"e=unknown-user", "unknown user"
            if attrs.get("r") != self.nonce or attrs.get("c") != "biws":
                return b"e=other-error", "nonce or channel binding mismatch"
            auth = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
            signature = hmac.new(cred.stored_key, auth, cred.hash).digest()
            client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof_b64), signature))
            if hashlib.new(cred.hash, client_key).digest() != cred.stored_key:
                return b"e=invalid-proof", "invalid proof"
            server_sig = hmac.new(cred.server_key, auth, cred.hash).digest()
            if self.tamper_signature:
                server_sig = bytes([server_sig[0] ^ 1]) + server_sig[1:]
            return b"v=" + base64.b64encode(server_sig), "ok"
        return b"", "unexpected message"


SASL_API_KEYS = API_KEYS + [{"api_key": 17, "min_version": 0, "max_version": 1},
                            {"api_key": 36, "min_version": 0, "max_version": 2}]


def sasl_handler(port_of, *, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), plain_users=None,
                 scram_users=None, errors_as="error_code", server_nonce=None, tamper_signature=False,
                 log=None, session_lifetime_ms=0, metadata_delay_s=0.0):
    """A handler factory for FakeBroker: ApiVersions, SaslHandshake, SaslAuthenticate, and (once
    authenticated) Metadata naming the broker itself.  Requests before authentication close the
    connection, as Kafka does.  With ``session_lifetime_ms`` the session expires like Kafka's
    (KIP-368): a SaslHandshake on an authenticated connection starts a re-authentication, during
    which any other request closes the connection, and so does a request after the session
    expired (logged as ("expired", api_key) / ("during-reauth", api_key)); a completed
    re-authentication is logged as ("reauthenticated", mechanism).  ``metadata_delay_s``: how
    long each Metadata answer takes, to keep requests in flight.  ``errors_as``: "error_code" answers a failed SCRAM proof with
    SASL_AUTHENTICATION_FAILED (Kafka's way); "e=" sends it in a server-final message with no
    error code (rsasl's -- Tansu's -- way).  ``log`` (a list) receives (event, detail) tuples
    and every auth_bytes seen, to check what went over the wire."""
    plain_users = plain_users or {}
    scram_users = scram_users or {}  # mechanism -> {user: ScramCredential}

    def factory():
        st = {"mech": None, "scram": None, "authed": False, "expires_at": None, "reauth": False}

        def authenticated():
            if st["reauth"] and log is not None:
                log.append(("reauthenticated", st["mech"]))
            st["authed"], st["reauth"] = True, False
            if session_lifetime_ms:
                st["expires_at"] = time.monotonic() + session_lifetime_ms / 1000

        def handler(key, v, cid, body):
            if key == 18:
                return api_versions_ok(v, cid, SASL_API_KEYS)
            if key == 17:
                mech = body["mechanism"]
                if mech not in mechanisms:
                    return frame("SaslHandshake", v, cid, {"error_code": 33, "mechanisms": list(mechanisms)})
                if st["authed"]:  # KIP-368: re-authentication on an authenticated connection
                    st["authed"], st["reauth"] = False, True
                st["mech"] = mech
                if mech != "PLAIN":
                    st["scram"] = ScramServer(mech, scram_users.get(mech, {}), server_nonce=server_nonce,
                                              tamper_signature=tamper_signature)
                return frame("SaslHandshake", v, cid, {"error_code": 0, "mechanisms": list(mechanisms)})
            if key == 36:
                data = bytes(body["auth_bytes"])
                if log is not None:
                    log.append(("auth_bytes", data))

                def answer(code, msg, out=b""):
                    return frame("SaslAuthenticate", v, cid, {
                        "error_code": code, "error_message": msg, "auth_bytes": out,
                        "session_lifetime_ms": session_lifetime_ms})
                if st["mech"] == "PLAIN":
                    _authz, user, password = data.split(b"\0")
                    if plain_users.get(user.decode()) == password.decode():
                        authenticated()
                        return answer(0, None)
                    return answer(58, "Authentication failed: Invalid username or password")
                scram = st["scram"]
                if scram is None:
                    return answer(34, "no handshake")
                out, outcome = scram.step(data)
                if log is not None:
                    log.append(("outcome", outcome))
                if outcome in (None, "ok"):
                    if outcome == "ok":
                        authenticated()
                    return answer(0, None, out)
                if errors_as == "e=":
                    return answer(0, None, out)
                return answer(58, f"Authentication failed during authentication due to invalid "
                                  f"credentials with SASL mechanism {scram.mechanism}")
            if not st["authed"]:
                if st["reauth"] and log is not None:
                    log.append(("during-reauth", key))
                raise OSError("request before authentication")  # closes the connection
            if st["expires_at"] is not None and time.monotonic() > st["expires_at"]:
                if log is not None:
                    log.append(("expired", key))
                raise OSError("SASL session expired")  # Kafka closes the connection too
            if key == 3:
                if metadata_delay_s:
                    time.sleep(metadata_delay_s)
                return frame("Metadata", v, cid, {
                    "throttle_time_ms": 0, "cluster_id": "fake", "controller_id": 1, "topics": [],
                    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port_of(), "rack": None}]})
            return None
        return handler
    return factory
