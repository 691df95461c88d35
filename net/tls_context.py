"""The server `ssl.SSLContext` of a tls or wss listener, built from its configuration.

Built at start-up (a bad file stops the broker with one line naming the key, the file and
what to do) and again on SIGHUP, for new connections only: the connections already up keep
the context they were made with. An encrypted private key is refused instead of letting
OpenSSL prompt for its pass phrase on the terminal of a daemon.

Client certificates: with `cafile`, a client certificate is asked for and, if sent, must be
signed by those CAs (`require_certificate` makes it mandatory); its common name is then the
connection's identity (`use_identity_as_username`).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from net.listener_config import ListenerConfig

VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


class TlsSetupError(Exception):
    """A listener's certificate, key, CA file or cipher list is unusable; the message says
    which key, which file, and what to do."""


class _EncryptedKeyError(Exception):
    """Raised by the pass phrase callback: the key is encrypted."""


def server_context(listener: ListenerConfig) -> ssl.SSLContext:
    """A server context for `listener` (type tls or wss); raises TlsSetupError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = VERSIONS[listener.tls_version]
    # A client asking for renegotiation costs the server a handshake each time: refuse.
    context.options |= ssl.OP_NO_RENEGOTIATION
    _load_chain(context, listener)
    if listener.cafile:
        _readable("cafile", listener.cafile)
        try:
            context.load_verify_locations(cafile=listener.cafile)
        except ssl.SSLError as error:
            raise TlsSetupError(
                f"cafile {listener.cafile}: no PEM CA certificate in it ({error.reason})"
            ) from error
        context.verify_mode = (
            ssl.CERT_REQUIRED if listener.require_certificate else ssl.CERT_OPTIONAL
        )
    if listener.ciphers:
        try:
            context.set_ciphers(listener.ciphers)
        except ssl.SSLError as error:
            raise TlsSetupError(
                f"ciphers {listener.ciphers!r}: no cipher matches this OpenSSL cipher list "
                "(see `openssl ciphers -v 'LIST'`)"
            ) from error
    return context


def _load_chain(context: ssl.SSLContext, listener: ListenerConfig) -> None:
    """The server's certificate chain and private key into `context`."""
    _readable("certfile", listener.certfile)
    if listener.keyfile:
        _readable("keyfile", listener.keyfile)
    key_where = (
        f"keyfile {listener.keyfile}" if listener.keyfile else f"certfile {listener.certfile}"
    )
    try:
        context.load_cert_chain(listener.certfile, listener.keyfile or None, _no_pass_phrase)
    except _EncryptedKeyError as error:
        raise TlsSetupError(
            f"{key_where}: the private key is encrypted; give the broker an unencrypted key "
            "(e.g. `openssl pkey -in KEY -out KEY.plain`) readable by its user only"
        ) from error
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise TlsSetupError(
                f"{key_where}: the private key does not match the certificate in certfile "
                f"{listener.certfile}"
            ) from error
        files = f"certfile {listener.certfile}"
        if listener.keyfile:
            files += f" / {key_where}"
        raise TlsSetupError(
            f"{files}: not a PEM certificate chain and private key ({error}); certfile must "
            "start with -----BEGIN CERTIFICATE-----, the key with -----BEGIN PRIVATE KEY----- "
            "(or RSA/EC PRIVATE KEY)"
        ) from error


def _readable(key: str, path: str) -> None:
    try:
        Path(path).read_bytes()
    except OSError as error:
        raise TlsSetupError(f"{key} {path}: cannot read it: {error.strerror}") from error


def _no_pass_phrase() -> str:
    raise _EncryptedKeyError
