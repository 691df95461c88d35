"""What one `[[listeners]]` table of the configuration asks for: the socket side's own
settings, parsed and checked by `actors.config`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """One `[[listeners]]` table; which keys apply depends on `type` (`_LISTENER_KEYS`)."""

    type: str = "tcp"
    host: str = "127.0.0.1"
    port: int = 1883  # the default depends on the type: _DEFAULT_PORTS
    max_connections: int = 100_000
    max_connection_rate: float = 0.0  # new connections accepted per second; 0 = unlimited
    # tls and wss; file names are resolved against the configuration file's directory
    certfile: str = ""
    keyfile: str = ""  # "" when the key is in certfile
    cafile: str = ""  # CA certificates that client certificates are verified against
    require_certificate: bool = False
    use_identity_as_username: bool = False
    tls_version: str = "1.2"
    ciphers: str = ""  # OpenSSL cipher list for TLS 1.2; "" keeps OpenSSL's default
    # ws and wss: the URL path; unix: the socket file
    path: str = "/mqtt"
    allowed_origins: tuple[str, ...] = ()  # ws and wss; empty: every origin

    @property
    def is_tls(self) -> bool:
        return self.type in ("tls", "wss")

    def describe(self) -> str:
        """ "tls 127.0.0.1:8883", "unix /run/mqtt.sock": how logs and errors name it."""
        if self.type == "unix":
            return f"unix {self.path}"
        return f"{self.type} {self.host}:{self.port}"
