"""The SASL exchange on one connection, without I/O: SaslHandshake, then SaslAuthenticate rounds.

::

    client: SaslHandshake v1 {mechanism}          broker: error_code (33: not enabled; mechanisms)
    client: SaslAuthenticate {auth_bytes}          broker: error_code, error_message, auth_bytes,
            ... one round per mechanism step               session_lifetime_ms (v1+, KIP-368)

The mechanism's messages come from :mod:`kwire.net.sasl` (PLAIN, SCRAM-SHA-256/512).  The same
exchange renews a session in band (KIP-368); then the SaslHandshake may wait behind the requests
already written, so it gets ``reauth_timeout_ms`` rather than the set-up timeout.

A refusal is an :class:`~kwire.errors.AuthenticationError` in the returned step: retrying with
the same credentials would fail the same way.  The exchange holds no password (the mechanism
does, and neither shows it in its repr); errors name the user, never the password.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import AuthenticationError, for_code
from ..protocol import api as _api
from .handshake import SetupRequest, SetupStep, choose_version, decode_body, reauth_at_ms
from .sasl import Mechanism

__all__ = ["SaslExchange", "SASL_HANDSHAKE", "SASL_AUTHENTICATE"]

SASL_HANDSHAKE = _api.api("SaslHandshake")
SASL_AUTHENTICATE = _api.api("SaslAuthenticate")
UNSUPPORTED_SASL_MECHANISM = 33


class SaslExchange:
    """One SASL exchange: :meth:`start` once ApiVersions is known, then :meth:`on_answer` for
    each answer until the step is ``authenticated`` or carries an ``error``."""

    def __init__(self, new_mechanism: Callable[[], Mechanism], username: str, *, node_id: int,
                 address: str, security_protocol: str, reauth: bool = False,
                 reauth_timeout_ms: int | None = None, rng: random.Random | None = None) -> None:
        self._new_mechanism = new_mechanism  # holds the credentials; called once, in start()
        self.mechanism: Mechanism | None = None
        self.username = username
        self.node_id = node_id
        self.address = address
        self.security_protocol = security_protocol
        self.reauth = reauth
        self.reauth_timeout_ms = reauth_timeout_ms
        self._rng = rng or random.Random()
        self._api_versions: Mapping[int, tuple[int, int]] = {}

    @property
    def name(self) -> str:
        return self.mechanism.name if self.mechanism is not None else "?"

    @property
    def _where(self) -> str:
        return f"node {self.node_id} ({self.address})"

    def start(self, api_versions: Mapping[int, tuple[int, int]]) -> SetupRequest:
        """The SaslHandshake v1 naming the mechanism.  Raises AuthenticationError when the
        broker offers no SaslHandshake v1 and SaslAuthenticate (not a SASL listener)."""
        hs = api_versions.get(SASL_HANDSHAKE.key)
        if hs is None or hs[1] < 1 or SASL_AUTHENTICATE.key not in api_versions:
            raise AuthenticationError(
                f"{self._where} does not offer SaslHandshake v1 and SaslAuthenticate: is it a SASL "
                f"listener (security.protocol={self.security_protocol})?")
        self._api_versions = api_versions
        self.mechanism = self._new_mechanism()
        return SetupRequest(SASL_HANDSHAKE, 1, {"mechanism": self.mechanism.name},
                            timeout_ms=self.reauth_timeout_ms if self.reauth else None)

    def on_answer(self, api_key: int, version: int, payload: bytes | bytearray | memoryview, *,
                  sent_ms: int) -> SetupStep:
        """The answer (payload with header) to the SaslHandshake or SaslAuthenticate of
        ``version`` written at ``sent_ms``.  Raises a KwireError if it cannot be decoded."""
        mech = self.mechanism
        if mech is None:
            raise RuntimeError("SaslExchange.on_answer before start()")
        if api_key == SASL_HANDSHAKE.key:
            body = decode_body(SASL_HANDSHAKE, version, payload)
            code = body["error_code"]
            if code == UNSUPPORTED_SASL_MECHANISM:
                offered = ", ".join(body.get("mechanisms") or []) or "none"
                return SetupStep(body, error=AuthenticationError(
                    f"{self._where} does not enable SASL mechanism {mech.name} (sasl.mechanism); "
                    f"it offers: {offered}"))
            if code != 0:
                return SetupStep(body, error=AuthenticationError(
                    f"{self._where} refused SaslHandshake: {for_code(code)}"))
            return self._authenticate(body, mech.initial())
        body = decode_body(SASL_AUTHENTICATE, version, payload)
        code = body["error_code"]
        if code != 0:
            return SetupStep(body, error=AuthenticationError(
                f"SASL {mech.name} authentication as {self.username!r} failed at {self._where}: "
                f"{for_code(code, body.get('error_message'))}"))
        try:
            reply = mech.step(body["auth_bytes"])
        except AuthenticationError as exc:
            return SetupStep(body, error=AuthenticationError(
                f"SASL authentication as {self.username!r} failed at {self._where}: {exc}"))
        if not mech.done:
            return self._authenticate(body, reply)
        lifetime_ms = body.get("session_lifetime_ms") or 0
        return SetupStep(body, authenticated=True, session_lifetime_ms=lifetime_ms,
                         reauth_at_ms=reauth_at_ms(sent_ms, lifetime_ms, self._rng))

    def _authenticate(self, body: dict[str, Any], auth_bytes: bytes) -> SetupStep:
        version = choose_version(self._api_versions, SASL_AUTHENTICATE, None,
                                 node_id=self.node_id, address=self.address)
        return SetupStep(body, send=SetupRequest(SASL_AUTHENTICATE, version, {"auth_bytes": auth_bytes}))

    def __repr__(self) -> str:  # no credentials
        return f"<SaslExchange {self.name} node={self.node_id}{' reauth' if self.reauth else ''}>"
