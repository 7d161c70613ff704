"""TLS for broker connections: the context built from the configuration, and a session that
encrypts and decrypts through memory buffers.

No I/O here.  :class:`TlsSession` wraps an ``ssl.SSLObject`` over two ``ssl.MemoryBIO``: the
network client feeds it the bytes ``recv`` produced and writes out what it returns, so TLS
fits the selectors loop like any other framing layer (asyncio does the same).  The handshake
is a connection state (``TLS_HANDSHAKE``): :meth:`TlsSession.handshake` is called after every
read until it reports completion.

Failures of the handshake -- an untrusted certificate, a name mismatch, an alert from the
broker, a peer that does not speak TLS -- raise :class:`~kwire.errors.SslAuthenticationError`:
retrying would fail the same way.
"""
from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config

from ..errors import ConfigError, KafkaConnectionError, SslAuthenticationError

__all__ = ["build_context", "TlsSession"]


def build_context(cfg: Config) -> ssl.SSLContext:
    """The client ``SSLContext`` for ``cfg`` (a :class:`~kwire.config.Config`).

    TLS 1.2 or newer; certificate verification on unless
    ``enable.ssl.certificate.verification=false``; hostname verification on unless
    ``ssl.endpoint.identification.algorithm=none``.  An unreadable file is a ConfigError
    naming its property.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    verify = cfg["enable.ssl.certificate.verification"]
    ctx.check_hostname = verify and cfg["ssl.endpoint.identification.algorithm"] == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    ca = cfg["ssl.ca.location"]
    try:
        if ca:
            import os
            if os.path.isdir(ca):
                ctx.load_verify_locations(capath=ca)
            else:
                ctx.load_verify_locations(cafile=ca)
        elif verify:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"invalid value for configuration property 'ssl.ca.location': "
                          f"cannot load {ca!r}: {exc}") from None
    cert, key = cfg["ssl.certificate.location"], cfg["ssl.key.location"]
    if key and not cert:
        raise ConfigError("configuration property 'ssl.key.location' needs 'ssl.certificate.location'")
    if cert:
        try:
            ctx.load_cert_chain(cert, keyfile=key or None, password=cfg["ssl.key.password"])
        except (OSError, ssl.SSLError) as exc:
            # The message names the files, never the password.
            raise ConfigError(f"invalid value for configuration property 'ssl.certificate.location' "
                              f"/ 'ssl.key.location': cannot load the client certificate "
                              f"{cert!r} (key {key or cert!r}): {type(exc).__name__}: "
                              f"{getattr(exc, 'reason', None) or exc.args[-1]}") from None
    return ctx


class TlsSession:
    """One connection's TLS state: bytes in from the socket, plaintext out, and back."""

    __slots__ = ("_in", "_out", "_obj", "server_hostname", "handshake_done")

    def __init__(self, ctx: ssl.SSLContext, server_hostname: str):
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        # server_hostname is sent as SNI (except for IP addresses) and checked against the
        # certificate's subjectAltName when ctx.check_hostname is on.
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=False,
                                 server_hostname=server_hostname)
        self.server_hostname = server_hostname
        self.handshake_done = False

    def handshake(self) -> bool:
        """Advance the handshake; True once it is complete.  Send :meth:`outgoing` afterwards."""
        try:
            self._obj.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLCertVerificationError as exc:
            raise SslAuthenticationError(
                f"TLS handshake with {self.server_hostname} failed: the broker's certificate did not "
                f"verify: {exc.verify_message or exc.reason} (check ssl.ca.location and, for a name "
                f"mismatch, ssl.endpoint.identification.algorithm)") from None
        except ssl.SSLError as exc:
            raise SslAuthenticationError(
                f"TLS handshake with {self.server_hostname} failed: {exc.reason or exc} "
                f"(is the listener TLS, and does it accept our client certificate?)") from None
        self.handshake_done = True
        return True

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes received from the socket."""
        self._in.write(data)

    def feed_eof(self) -> None:
        self._in.write_eof()

    def read(self) -> bytes:
        """All the plaintext decryptable from what was fed so far (b"" if none).

        Raises KafkaConnectionError when the broker closed the TLS session (close_notify) or
        the records are corrupt."""
        chunks = []
        while True:
            try:
                chunk = self._obj.read(256 * 1024)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                raise KafkaConnectionError(f"{self.server_hostname} closed the TLS session") from None
            except ssl.SSLError as exc:
                reason = str(exc.reason or exc)
                if "ALERT" in reason.upper() and "CERTIFICATE" in reason.upper():
                    # TLS 1.3: the broker checks our certificate after our side of the handshake
                    # is done, so its refusal arrives as an alert on the first read.
                    raise SslAuthenticationError(
                        f"{self.server_hostname} refused the TLS session: {reason} (check "
                        f"ssl.certificate.location / ssl.key.location)") from None
                raise KafkaConnectionError(f"TLS error from {self.server_hostname}: {reason}") from None
            if not chunk:
                break
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def encrypt(self, plaintext: bytes | bytearray | memoryview) -> bytes:
        """TLS records carrying ``plaintext`` (plus anything else TLS had to send)."""
        self._obj.write(plaintext)
        return self._out.read()

    def outgoing(self) -> bytes:
        """Bytes TLS wants sent (handshake messages, alerts, key updates); b"" if none."""
        return self._out.read()

    @property
    def version(self) -> str | None:
        return self._obj.version()

    def cipher(self) -> tuple[str, str, int] | None:
        return self._obj.cipher()
