"""The socket to a bridge's remote broker: TCP, or TLS with the stdlib `ssl` module.

`client_context` builds the TLS client context once, at start-up: an unreadable or wrong
file stops the broker with one line naming the bridge, the key and the file
(`TlsSetupError`). `open_remote` connects to one address; a failure (refused, unreachable,
a certificate the CAs do not vouch for, a name that does not match) raises `ConnectError`
whose message says what went wrong and what to check. `answers` tells whether an address
takes a TCP connection (how a bridge away from its first address sees it back).
"""

from __future__ import annotations

import ssl
from pathlib import Path
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
    if config.tls_version:  # that version only, as Mosquitto's bridge_tls_version
        context.minimum_version = context.maximum_version = _TLS_VERSIONS[config.tls_version]
    try:
        if config.cafile:
            context.load_verify_locations(cafile=config.cafile)
        elif not config.capath:
            context.load_default_certs()
    except (OSError, ssl.SSLError) as error:
        raise TlsSetupError(
            f"{where}: cafile {config.cafile}: {error} (a PEM file of CA certificates)"
        ) from None
    if config.capath:
        _load_capath(context, where, config.capath)
    if config.alpn:
        context.set_alpn_protocols([config.alpn])
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


_TLS_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


def _load_capath(context: ssl.SSLContext, where: str, capath: str) -> None:
    """Trust the CA certificates of the directory `capath` (looked up by their hashed names
    during each handshake, so a certificate added there later counts)."""
    if not Path(capath).is_dir():
        raise TlsSetupError(
            f"{where}: capath {capath} is not a directory (a directory of CA certificates "
            "named by their hashes: `openssl rehash` it)"
        )
    try:
        context.load_verify_locations(capath=capath)
    except (OSError, ssl.SSLError) as error:
        raise TlsSetupError(f"{where}: capath {capath}: {error}") from None


def _no_prompt() -> str:
    raise ValueError("the private key is encrypted; give an unencrypted key")


def open_remote(
    address: str, tls: ssl.SSLContext | None, timeout: float, bind_address: str = ""
) -> Any:
    """A connected gevent socket to `address` ("host:port") from `bind_address` (any when
    ""), TLS-wrapped with `tls`.

    Raises ConnectError."""
    host, port = _host_port(address)
    source = (bind_address, 0) if bind_address else None
    try:
        with gevent.Timeout(timeout, ConnectError(f"no answer within {timeout} s")):
            sock = gevent.socket.create_connection(
                (host, port), timeout=timeout, source_address=source
            )
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


def answers(address: str, timeout: float, bind_address: str = "") -> bool:
    """Whether `address` takes a TCP connection within `timeout` seconds (closed at once)."""
    host, port = _host_port(address)
    source = (bind_address, 0) if bind_address else None
    try:
        gevent.socket.create_connection(
            (host, port), timeout=timeout, source_address=source
        ).close()
    except OSError:  # refused, unreachable, or no answer within the timeout
        return False
    return True


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)  # "[::1]:1883"
