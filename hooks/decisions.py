"""The values hook callbacks return: tri-state decisions, authentication results, Stop, DROP.

- `Decision` is what client.authenticate and client.authorize callbacks answer: ALLOW or DENY
  ends the chain (the first non-IGNORE answer wins), IGNORE passes to the next callback
  (emqttd `allow | deny | ignore`, Mosquitto `MOSQ_ERR_PLUGIN_DEFER`).
- `AuthResult` is the outcome of authentication as the broker sees it: allowed, or refused
  with an `AuthFailure` that names its MQTT 5.0 CONNACK reason code (the encoder maps it
  to the 3.1.1 return code for older clients); SERVER_UNAVAILABLE (0x88, 3.1.1: 3) is for
  a backend that could not answer, so a client knows to try again rather than to fix its
  credentials. An enhanced authentication (MQTT 5.0
  section 4.12) may end with `data` for the client (sent as Authentication Data in CONNACK
  or in the final AUTH) and name the `username` it proved. Any result may carry
  `user_properties` for the CONNACK of a 5.0 client (accepting or refusing), and an
  allowing one `expires_at`, when the connection is to be closed.
- `AuthContinue` answers a step of an enhanced authentication that is not over: the broker
  sends AUTH with reason 0x18 (Continue authentication) and `data`, and hands `state` back
  to the plugin with the client's next AUTH.
- `Stop(value)` halts a chain: in a notify chain the value is ignored, in a fold it becomes
  the result.
- `DROP` is returned by a message.publish callback to drop the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from mqtt.reason_codes import ReasonCode


class Decision(Enum):
    ALLOW = "allow"
    DENY = "deny"
    IGNORE = "ignore"


class AuthFailure(Enum):
    """Why a CONNECT was refused; each member knows its CONNACK reason code."""

    # MQTT 5.0 reason code 0x86; MQTT 3.1.1 CONNACK 0x04 "bad user name or password".
    BAD_CREDENTIALS = "bad_credentials"
    # MQTT 5.0 reason code 0x87; MQTT 3.1.1 CONNACK 0x05 "not authorized".
    NOT_AUTHORIZED = "not_authorized"
    # MQTT 5.0 reason code 0x8C: no plugin implements the requested Authentication Method.
    BAD_AUTHENTICATION_METHOD = "bad_authentication_method"
    # MQTT 5.0 reason code 0x88; MQTT 3.1.1 CONNACK 0x03 "server unavailable": the service
    # that decides (a plugin's backend) is busy, timed out or failed (`plugins.offload`).
    SERVER_UNAVAILABLE = "server_unavailable"

    @property
    def connack_v5(self) -> ReasonCode:
        """The CONNACK reason code (MQTT 5.0 section 3.2.2.2); `mqtt.encoder` sends a
        3.1/3.1.1 client the nearest return code (3.1.1 section 3.2.2.3)."""
        if self is AuthFailure.BAD_CREDENTIALS:
            return ReasonCode.BAD_USER_NAME_OR_PASSWORD
        if self is AuthFailure.BAD_AUTHENTICATION_METHOD:
            return ReasonCode.BAD_AUTHENTICATION_METHOD
        if self is AuthFailure.SERVER_UNAVAILABLE:
            return ReasonCode.SERVER_UNAVAILABLE
        return ReasonCode.NOT_AUTHORIZED


@dataclass(frozen=True, slots=True)
class AuthResult:
    """The result of authenticating a CONNECT: `reason` is None exactly when `allowed`."""

    allowed: bool
    reason: AuthFailure | None = None
    data: bytes | None = None  # enhanced authentication: the last Authentication Data
    username: str | None = None  # enhanced authentication: the identity it proved
    # (name, value) pairs a 5.0 client gets as User Properties on its CONNACK, in order,
    # when they fit in its Maximum Packet Size [MQTT-3.2.2-20]; 3.x clients get none.
    user_properties: tuple[tuple[str, str], ...] = ()
    # Unix time at which the credentials stop being valid (a JWT's `exp`): the broker then
    # closes the connection (5.0: DISCONNECT 0x87 Not authorized). None: they do not expire.
    expires_at: float | None = None

    def __post_init__(self) -> None:
        if self.allowed != (self.reason is None):
            raise ValueError(
                f"AuthResult(allowed={self.allowed}, reason={self.reason}): an allowed result "
                "has no reason and a refused one needs one"
            )
        for pair in self.user_properties:
            if not (
                isinstance(pair, tuple)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and isinstance(pair[1], str)
            ):
                raise ValueError(
                    f"AuthResult user_properties: {pair!r} is not a (name, value) pair of str"
                )


@dataclass(frozen=True, slots=True)
class AuthContinue:
    """An enhanced authentication goes on: send the client AUTH 0x18 with `data`; `state`
    comes back in the next `AuthenticateRequest` of this connection."""

    data: bytes
    state: Any = None


AUTH_ALLOWED = AuthResult(allowed=True)
AUTH_BAD_CREDENTIALS = AuthResult(allowed=False, reason=AuthFailure.BAD_CREDENTIALS)
AUTH_NOT_AUTHORIZED = AuthResult(allowed=False, reason=AuthFailure.NOT_AUTHORIZED)
AUTH_BAD_METHOD = AuthResult(allowed=False, reason=AuthFailure.BAD_AUTHENTICATION_METHOD)
AUTH_SERVER_UNAVAILABLE = AuthResult(allowed=False, reason=AuthFailure.SERVER_UNAVAILABLE)


@dataclass(frozen=True, slots=True)
class Stop:
    """Returned by a callback to halt its chain; in a fold `value` is the fold's result."""

    value: Any = None


class Drop(Enum):
    """The type of `DROP` (a one-member Enum, so type checkers can name it)."""

    DROP = "drop"


DROP = Drop.DROP
