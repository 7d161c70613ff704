"""SASL client mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, 7677).

No I/O.  A mechanism produces the bytes of each SaslAuthenticate request and checks each answer;
the exchange in :mod:`kwire.net.sasl_exchange` carries them:

    mech = new_mechanism("SCRAM-SHA-256", "alice", "secret")
    out = mech.initial()              # auth_bytes of the first SaslAuthenticate
    while not mech.done:
        out = mech.step(answer)       # answer: auth_bytes of the broker's response

Errors are :class:`~kwire.errors.AuthenticationError` and never contain the password (nor
anything derived from it).

SCRAM messages (RFC 5802 section 7; attributes are ``name=value``, comma-separated)::

    client-first  = "n,," "n=" saslname ",r=" client-nonce
    server-first  = "r=" client-nonce server-nonce ",s=" base64(salt) ",i=" iterations
    client-final  = "c=biws,r=" nonce ",p=" base64(ClientKey XOR HMAC(StoredKey, AuthMessage))
    server-final  = "v=" base64(HMAC(ServerKey, AuthMessage))  |  "e=" error

with ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``, ``ClientKey =
HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``, ``ServerKey =
HMAC(SaltedPassword, "Server Key")`` and ``AuthMessage = client-first-bare "," server-first ","
client-final-without-proof``.  "biws" is base64("n,,"): no channel binding.

The password is not SASLprep-normalised (RFC 4013): Kafka's brokers hash the UTF-8 bytes as
given, and so must we for non-ASCII passwords to match.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from ..errors import AuthenticationError

__all__ = ["MECHANISMS", "Mechanism", "Plain", "Scram", "new_mechanism", "scram_salted_password"]

# iterations a broker may ask for: Kafka requires 4096..16384; beyond our upper bound a
# hostile server would only be making us burn CPU.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 1_000_000

_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class Mechanism:
    """One SASL exchange (a fresh instance per connection)."""

    name = ""

    def __init__(self) -> None:
        self.done = False

    def initial(self) -> bytes:
        raise NotImplementedError

    def step(self, challenge: bytes) -> bytes:
        """The broker answered ``challenge``; return the next auth_bytes to send, or b"" with
        ``done`` set when the exchange is complete."""
        raise NotImplementedError

    def __repr__(self) -> str:  # no credentials
        return f"<{type(self).__name__} {self.name} done={self.done}>"


class Plain(Mechanism):
    """PLAIN: one message ``authzid NUL authcid NUL password``; the broker's empty answer (or
    an error code) ends it."""

    name = "PLAIN"

    def __init__(self, username: str, password: str):
        super().__init__()
        self._username = username
        self._password = password

    def initial(self) -> bytes:
        return b"\0" + self._username.encode() + b"\0" + self._password.encode()

    def step(self, challenge: bytes) -> bytes:
        self.done = True
        return b""


def _saslname(username: str) -> str:
    # RFC 5802 5.1: "=" and "," in the user name are escaped as =3D and =2C.
    return username.replace("=", "=3D").replace(",", "=2C")


def _parse_attrs(message: bytes, what: str) -> dict[str, str]:
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"SCRAM {what} from the broker is not UTF-8") from None
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationError(f"malformed SCRAM {what} from the broker: {text[:200]!r}")
        out.setdefault(part[0], part[2:])
    return out


def scram_salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword := Hi(password, salt, i) -- PBKDF2 with HMAC-``hash_name``."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


class Scram(Mechanism):
    """SCRAM-SHA-256 / SCRAM-SHA-512 client (no channel binding)."""

    def __init__(self, name: str, username: str, password: str, *, nonce: str | None = None):
        super().__init__()
        if name not in _SCRAM_HASHES:
            raise AuthenticationError(f"unknown SCRAM mechanism {name!r}")
        self.name = name
        self._hash = _SCRAM_HASHES[name]
        self._username = username
        self._password = password
        # Printable, without ",": URL-safe base64 of 24 random bytes.
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._state = "initial"

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def initial(self) -> bytes:
        if self._state != "initial":
            raise AuthenticationError("SCRAM exchange already started")
        self._state = "client-first"
        return ("n,," + self._client_first_bare).encode("utf-8")

    def step(self, challenge: bytes) -> bytes:
        if self._state == "client-first":
            return self._client_final(bytes(challenge))
        if self._state == "client-final":
            self._verify_server_final(bytes(challenge))
            return b""
        raise AuthenticationError(f"SCRAM: unexpected message from the broker in state {self._state}")

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _parse_attrs(server_first, "server-first-message")
        if "e" in attrs:
            raise AuthenticationError(f"{self.name} authentication failed: {attrs['e']}")
        if "m" in attrs:  # RFC 5802: a mandatory extension we do not know must fail
            raise AuthenticationError(f"{self.name}: the broker requires an unsupported extension")
        nonce, salt_b64, iters = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iters is None:
            raise AuthenticationError(f"{self.name}: server-first-message lacks r, s or i")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise AuthenticationError(f"{self.name}: the broker's nonce does not extend ours")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iters)
        except ValueError:
            raise AuthenticationError(f"{self.name}: malformed salt or iteration count") from None
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise AuthenticationError(f"{self.name}: the broker asks for {iterations} iterations; "
                                      f"kwire accepts {SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}")
        salted = scram_salted_password(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = ",".join((self._client_first_bare, server_first.decode("utf-8"),
                                 without_proof)).encode("utf-8")
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._state = "client-final"
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def _verify_server_final(self, server_final: bytes) -> None:
        attrs = _parse_attrs(server_final, "server-final-message")
        if "e" in attrs:
            raise AuthenticationError(f"{self.name} authentication failed: {attrs['e']}")
        try:
            theirs = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            theirs = b""
        if not theirs or not hmac.compare_digest(theirs, self._server_signature or b""):
            # The broker does not know our password: it is not the broker we think it is.
            raise AuthenticationError(f"{self.name}: the broker's server signature does not verify")
        self._state = "done"
        self.done = True


MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def new_mechanism(name: str, username: str, password: str) -> Mechanism:
    name = name.upper()
    if name == "PLAIN":
        return Plain(username, password)
    if name in _SCRAM_HASHES:
        return Scram(name, username, password)
    raise AuthenticationError(f"unsupported SASL mechanism {name!r}; kwire knows {', '.join(MECHANISMS)}")
