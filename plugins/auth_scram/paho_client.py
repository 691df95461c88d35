"""SCRAM-SHA-256 for paho-mqtt 2.x: the client's side of `plugins.auth_scram`, for applications.

paho-mqtt (2.2) puts CONNECT's Authentication Method and Data on the wire but has no handler
for AUTH packets, so on its own it cannot finish a multi-step method. `ScramPahoClient` is a
`paho.mqtt.client.Client` (MQTT 5.0, callback API 2) that runs the exchange of
`plugins.auth_scram.scram.ScramClient` (docs/mqtt5.md, "SCRAM-SHA-256"):

    client = ScramPahoClient("alice", "s3cret", "sensor-1")
    client.on_connect = ...          # CONNACK as usual: 0x00, or 0x86 for a wrong password
    client.on_scram_result = ...     # (client, userdata, None | ScramError)
    client.connect("broker.example", 1883)
    client.loop_start()
    ...
    client.reauthenticate()          # AUTH 0x19; the broker's AUTH 0x00 ends it

Every connection attempt (`connect`, `reconnect`, paho's automatic reconnects) starts a fresh
exchange with a new nonce: the client-first goes into the CONNECT's properties, the
server-first (AUTH 0x18) is answered with the client-final (AUTH 0x18), and the server-final
in CONNACK 0x00 (AUTH 0x00 after `reauthenticate`) is checked before paho sees the CONNACK.
`on_scram_result` gets None when it verifies (before `on_connect`). If it does not, the
broker has not proved that it holds the user's ServerKey: the client does not trust the
connection: `on_connect` is not called, `scram_error` and `on_scram_result` get the
ScramError, an ERROR line is logged and the client sends DISCONNECT 0x80 (with a Reason
String) and does not reconnect (paho's `on_disconnect` follows, reporting 0x00 as for any
disconnection the client asked for). A refusal by the broker reaches paho's callbacks as usual
(CONNACK 0x86 in `on_connect`, DISCONNECT 0x87 after a failed re-authentication in
`on_disconnect`); an AUTH out of turn is a protocol error (paho closes, as for any packet it
does not expect).

This is a client library: nothing in the broker imports it, and it is the one module of the
broker's packages that imports paho (an optional dependency: the `dev` and `load` extras).
paho has no extension point for AUTH, so the class overrides paho 2.x internals:
`_send_connect` (one call per connection attempt), `_packet_handle` and its `_in_packet`
(the packet read, run in paho's network thread), `_packet_queue` (send) and
`_connect_properties`. The exchange state is per attempt, guarded by a lock because
`reauthenticate` runs in the caller's thread.
"""

from __future__ import annotations

import copy
import enum
import logging
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.exception import MQTTException
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties, VariableByteIntegers
from paho.mqtt.reasoncodes import ReasonCode

from plugins.auth_scram.scram import METHOD, ScramClient, ScramError

logger = logging.getLogger(__name__)

AUTH = 0xF0  # packet type 15, reserved flags 0 [MQTT-3.15.1-1]
SUCCESS = 0x00
CONTINUE_AUTHENTICATION = 0x18
RE_AUTHENTICATE = 0x19

ScramResultCallback = Callable[["ScramPahoClient", Any, "ScramError | None"], None]


class MalformedAnswerError(ValueError):
    """A CONNACK or AUTH from the broker that cannot be decoded."""


class AuthFields(NamedTuple):
    """What the exchange needs of a CONNACK or AUTH: reason code, method and data."""

    reason_code: int
    method: str | None
    data: bytes


def auth_packet(reason_code: int, data: bytes) -> bytes:
    """An AUTH packet (section 3.15) with Authentication Method SCRAM-SHA-256 and `data`."""
    properties = Properties(PacketTypes.AUTH)
    properties.AuthenticationMethod = METHOD
    properties.AuthenticationData = data
    body = bytes([reason_code]) + properties.pack()
    return bytes([AUTH]) + VariableByteIntegers.encode(len(body)) + body


def auth_fields(body: bytes, packet_type: int) -> AuthFields:
    """Decode an AUTH body, or a CONNACK body after its flags byte: a reason code then
    properties. An empty AUTH body is reason 0x00 without properties (section 3.15.2.1)."""
    if not body:
        return AuthFields(SUCCESS, None, b"")
    properties = Properties(packet_type)
    if len(body) > 1:
        try:
            properties.unpack(body[1:])
        except (MQTTException, KeyError, IndexError, TypeError, struct.error, ValueError) as error:
            raise MalformedAnswerError(f"bad properties: {error}") from error
    method = getattr(properties, "AuthenticationMethod", None)
    return AuthFields(body[0], method, bytes(getattr(properties, "AuthenticationData", b"")))


class _Stage(enum.Enum):
    SENT_FIRST = "client-first sent, waiting for the server-first"
    SENT_FINAL = "client-final sent, waiting for the server-final"


@dataclass(slots=True)
class _Exchange:
    """One SCRAM exchange: at CONNECT, or a re-authentication."""

    scram: ScramClient
    reauthentication: bool
    stage: _Stage = _Stage.SENT_FIRST


def _server_final_error(
    exchange: _Exchange | None, fields: AuthFields, reauthentication: bool
) -> ScramError | None:
    """None if `fields` (CONNACK 0x00 / AUTH 0x00) prove the broker's key, else why not."""
    if exchange is None or exchange.reauthentication != reauthentication:
        return ScramError("the broker reported success without a SCRAM exchange")
    if exchange.stage is not _Stage.SENT_FINAL:
        return ScramError("the broker reported success before it had the client's proof")
    if fields.method != METHOD:
        return ScramError(f"the broker's success names the method {fields.method!r}")
    try:
        exchange.scram.verify(fields.data)
    except ScramError as error:
        return error
    return None


class ScramPahoClient(paho.Client):
    """A paho MQTT 5.0 client that authenticates with SCRAM-SHA-256 (see the module doc).

    `options` go to `paho.mqtt.client.Client` (userdata, transport, reconnect_on_failure,
    ...); the callback API is VERSION2 and the protocol MQTT 5.0. The CONNECT User Name is
    left to the caller: if set, it must be `username` (the broker refuses another, 0x87).
    """

    def __init__(
        self, username: str, password: str | bytes, client_id: str = "", **options: Any
    ) -> None:
        super().__init__(CallbackAPIVersion.VERSION2, client_id, protocol=paho.MQTTv5, **options)
        self._scram_username = username
        self._scram_password = password.encode() if isinstance(password, str) else password
        self._scram_lock = threading.Lock()
        self._exchange: _Exchange | None = None
        self.scram_error: ScramError | None = None  # why the last attempt was not trusted
        self.on_scram_result: ScramResultCallback | None = None

    def reauthenticate(self) -> MQTTErrorCode:
        """Start a re-authentication (AUTH 0x19, section 4.12.1). Its end is reported to
        `on_scram_result`; a refusal is the broker's DISCONNECT 0x87. MQTT_ERR_NO_CONN when
        not connected, MQTT_ERR_INVAL while an exchange is already running."""
        if not self.is_connected():
            return MQTTErrorCode.MQTT_ERR_NO_CONN
        scram = ScramClient(self._scram_username, self._scram_password)
        with self._scram_lock:
            if self._exchange is not None:
                return MQTTErrorCode.MQTT_ERR_INVAL
            self._exchange = _Exchange(scram, reauthentication=True)
        return self._packet_queue(AUTH, auth_packet(RE_AUTHENTICATE, scram.first()), 0, 0)

    def _send_connect(self, keepalive: int) -> MQTTErrorCode:
        """Each connection attempt: a new nonce, its client-first in the CONNECT properties
        (a copy of the caller's, which stay as they were)."""
        scram = ScramClient(self._scram_username, self._scram_password)
        base = self._connect_properties
        properties = Properties(PacketTypes.CONNECT) if base is None else copy.copy(base)
        properties.AuthenticationMethod = METHOD
        properties.AuthenticationData = scram.first()
        self._connect_properties = properties
        with self._scram_lock:
            self._exchange = _Exchange(scram, reauthentication=False)
        self.scram_error = None
        return super()._send_connect(keepalive)

    def _packet_handle(self) -> MQTTErrorCode:
        command = self._in_packet["command"] & 0xF0
        if command == AUTH:
            return self._handle_auth()
        if command == paho.CONNACK:
            return self._handle_scram_connack()
        return super()._packet_handle()

    def _take_exchange(self) -> _Exchange | None:
        with self._scram_lock:
            exchange, self._exchange = self._exchange, None
        return exchange

    def _handle_scram_connack(self) -> MQTTErrorCode:
        """Check the server-final of CONNACK 0x00 before paho (and `on_connect`) see it."""
        exchange = self._take_exchange()
        try:
            fields = auth_fields(bytes(self._in_packet["packet"][1:]), PacketTypes.CONNACK)
        except MalformedAnswerError as error:
            return self._protocol_error(f"malformed CONNACK: {error}")
        if fields.reason_code == SUCCESS:
            failure = _server_final_error(exchange, fields, reauthentication=False)
            if failure is not None:
                self._distrust(failure)
                return MQTTErrorCode.MQTT_ERR_SUCCESS
            self._verified("connect")
        return super()._packet_handle()

    def _handle_auth(self) -> MQTTErrorCode:
        try:
            fields = auth_fields(bytes(self._in_packet["packet"]), PacketTypes.AUTH)
        except MalformedAnswerError as error:
            return self._protocol_error(f"malformed AUTH: {error}")
        with self._scram_lock:
            exchange = self._exchange
        if exchange is None or fields.method != METHOD:
            return self._protocol_error(
                f"AUTH 0x{fields.reason_code:02X} (method {fields.method!r}) outside a "
                f"{METHOD} exchange"
            )
        if fields.reason_code == CONTINUE_AUTHENTICATION and exchange.stage is _Stage.SENT_FIRST:
            return self._send_client_final(exchange, fields.data)
        if fields.reason_code == SUCCESS and exchange.reauthentication:
            self._take_exchange()
            failure = _server_final_error(exchange, fields, reauthentication=True)
            if failure is not None:
                self._distrust(failure)
            else:
                self._verified("re-authentication")
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        return self._protocol_error(
            f"AUTH 0x{fields.reason_code:02X} out of turn ({exchange.stage.value})"
        )

    def _send_client_final(self, exchange: _Exchange, server_first: bytes) -> MQTTErrorCode:
        try:
            client_final = exchange.scram.final(server_first)
        except ValueError as error:  # ScramError, or a server-first that is not UTF-8
            self._take_exchange()
            self._distrust(ScramError(f"bad server-first: {error}"))
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        exchange.stage = _Stage.SENT_FINAL
        return self._packet_queue(AUTH, auth_packet(CONTINUE_AUTHENTICATION, client_final), 0, 0)

    @property
    def _log_id(self) -> str:
        return self._client_id.decode("utf-8", "replace")

    def _protocol_error(self, what: str) -> MQTTErrorCode:
        """paho closes the connection, reports 0x82 to `on_disconnect` and may reconnect."""
        logger.warning("%s: client %r: protocol error: %s", METHOD, self._log_id, what)
        return MQTTErrorCode.MQTT_ERR_PROTOCOL

    def _verified(self, what: str) -> None:
        logger.info(
            "%s: client %r: %s: the broker proved it holds the key of %r",
            METHOD,
            self._log_id,
            what,
            self._scram_username,
        )
        self._report(None)

    def _distrust(self, error: ScramError) -> None:
        """The broker did not prove itself: report, then DISCONNECT 0x80 and stay offline."""
        logger.error(
            "%s: client %r does not trust the broker, disconnecting: %s",
            METHOD,
            self._log_id,
            error,
        )
        self.scram_error = error
        self._report(error)
        properties = Properties(PacketTypes.DISCONNECT)
        properties.ReasonString = f"{METHOD}: {error}"
        self.disconnect(ReasonCode(PacketTypes.DISCONNECT, "Unspecified error"), properties)

    def _report(self, error: ScramError | None) -> None:
        callback = self.on_scram_result
        if callback is None:
            return
        try:
            callback(self, self.user_data_get(), error)
        except Exception:
            logger.exception("%s: on_scram_result raised", METHOD)
            if not self.suppress_exceptions:
                raise
