"""The socket to a bridge's remote broker: TCP, or TLS with the stdlib `ssl` module.

`client_context` builds the TLS client context once, at start-up: an unreadable or wrong
file stops the broker with one line naming the bridge, the key and the file
(`TlsSetupError`). `open_remote` connects to one address; a failure (refused, unreachable,
a certificate the CAs do not vouch for, a name that does not match) raises `ConnectError`
whose message says what went wrong and what to check.
"""

from __future__ import annotations

import ssl
from typing import Any

import gevent
import gevent.socket
import gevent.ssl

from bridge.config import BridgeConfig
from net.tls_context import TlsSetupError


class ConnectError(Exception):
    """No connection to the address; the message says why."""


def client_context(config: BridgeConfig) -> ssl.SSLContext | None:
    """The TLS context of `config`'s connections; None without TLS. Raises TlsSetupError."""
    if not config.uses_tls:
        return None
    where = f"bridge {config.name!r}"
    context = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if config.cafile:
            context.load_verify_locations(cafile=config.cafile)
        else:
            context.load_default_certs()
    except (OSError, ssl.SSLError) as error:
        raise TlsSetupError(
            f"{where}: cafile {config.cafile}: {error} (a PEM file of CA certificates)"
        ) from None
    if config.certfile:
        try:
            context.load_cert_chain(config.certfile, config.keyfile or None, password=_no_prompt)
        except (OSError, ssl.SSLError, ValueError) as error:
            raise TlsSetupError(
                f"{where}: certfile {config.certfile} / keyfile {config.keyfile or '(in certfile)'}"
                f": {error} (a PEM certificate and its unencrypted key)"
            ) from None
    context.check_hostname = not config.tls_insecure
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _no_prompt() -> str:
    raise ValueError("the private key is encrypted; give an unencrypted key")


def open_remote(address: str, tls: ssl.SSLContext | None, timeout: float) -> Any:
    """A connected gevent socket to `address` ("host:port"), TLS-wrapped with `tls`.

    Raises ConnectError."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")  # "[::1]:1883"
    try:
        with gevent.Timeout(timeout, ConnectError(f"no answer within {timeout} s")):
            sock = gevent.socket.create_connection((host, int(port)), timeout=timeout)
            sock.settimeout(None)  # reads wait as long as the link lives (keep-alive ends it)
            if tls is None:
                return sock
            try:
                return tls.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
    except ssl.SSLCertVerificationError as error:
        raise ConnectError(
            f"TLS: the remote broker's certificate was refused: {error.verify_message} "
            "(check the bridge's cafile, and that the address is a name its certificate holds)"
        ) from None
    except ssl.SSLError as error:
        raise ConnectError(
            f"TLS handshake failed: {error.reason or error} (does the remote ask for a client "
            "certificate the bridge has not got (certfile), or refuse the one it sent?)"
        ) from None
    except OSError as error:
        raise ConnectError(str(error.strerror or error)) from None
