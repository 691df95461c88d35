"""The TLS stream layer: the server side of a TLS session over memory buffers (stdlib `ssl`).

`ssl.SSLContext.wrap_bio` gives an `SSLObject` that reads the peer's records from one
`MemoryBIO` and writes its own into another; the socket stays with the reader and the
transport. `receive` drives the handshake and then decrypts; `send` encrypts. Whatever
OpenSSL wants to send (handshake records, session tickets, alerts, close_notify) is drained
from the outgoing buffer after every call and returned, to be written at once.

A failed handshake (a plain MQTT client on the TLS port, an untrusted client certificate, no
common protocol version or cipher) raises `LayerError` naming OpenSSL's reason, with the
alert OpenSSL produced as the reply. The client certificate's common name, when the context
verified one, is `identity` (`use_identity_as_username`).
"""

from __future__ import annotations

import ssl
from typing import Any

from net.stream_layers import LayerError

READ_SIZE = 65536  # plaintext bytes per SSLObject.read call


class TlsLayer:
    """One connection's TLS session, server side; see the module docstring."""

    __slots__ = ("_closed", "_incoming", "_outgoing", "_tls", "identity", "peer_closed", "ready")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.ready = False
        self.peer_closed = False
        self.identity: str | None = None
        self._closed = False  # close() ran: nothing more is written into the session

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        if self.peer_closed:
            return b"", b""  # nothing may follow close_notify
        self._incoming.write(data)
        if not self.ready:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                return b"", self._outgoing.read()
            except ssl.SSLError as error:
                raise LayerError(
                    f"TLS handshake failed: {_describe(error)}", self._outgoing.read()
                ) from error
            self.ready = True
            self.identity = common_name(self._tls.getpeercert())
        return self._read_plaintext(), self._outgoing.read()

    def send(self, data: bytes) -> bytes:
        if not self.ready or self._closed:
            return b""  # no session to write into (never ready, or closed)
        try:
            self._tls.write(data)
        except ssl.SSLError:
            return b""  # the session failed: the reader sees the same error and closes
        return self._outgoing.read()

    def close(self) -> bytes:
        if not self.ready or self._closed:
            return b""
        self._closed = True
        try:
            self._tls.unwrap()
        except ssl.SSLWantReadError:
            pass  # close_notify is written; the peer's answer is not awaited
        except ssl.SSLError:
            return b""
        return self._outgoing.read()

    def _read_plaintext(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self._tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLError as error:
                raise LayerError(
                    f"TLS record rejected: {_describe(error)}", self._outgoing.read()
                ) from error
            if not chunk:  # Python's read returns b"" once the peer's close_notify is in
                self.peer_closed = True
                break
            chunks.append(chunk)
        return b"".join(chunks)


def common_name(certificate: dict[str, Any] | None) -> str | None:
    """The subject's commonName of a verified peer certificate (`SSLObject.getpeercert()`).

    None without a certificate: `getpeercert()` is None or empty unless the certificate was
    presented and verified against the context's CA certificates.
    """
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


# What the usual handshake failures mean, for the log line.
_HINTS = {
    "WRONG_VERSION_NUMBER": "not TLS: a plain MQTT client on a TLS port?",
    "HTTP_REQUEST": "not TLS: plain HTTP on a TLS port",
    "UNSUPPORTED_PROTOCOL": "the client offers only TLS versions older than tls_version",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no client certificate; the listener requires one",
    "CERTIFICATE_VERIFY_FAILED": "the client certificate is not signed by the listener's cafile",
    "NO_SHARED_CIPHER": "no cipher in common with the listener's ciphers",
}


def _describe(error: ssl.SSLError) -> str:
    """OpenSSL's reason ("WRONG_VERSION_NUMBER"...), with OpenSSL's verification message or
    what the reason usually means."""
    reason = getattr(error, "reason", None)
    if not reason:
        return str(error)
    detail = getattr(error, "verify_message", None) or _HINTS.get(reason)
    return f"{reason} ({detail})" if detail else str(reason)
