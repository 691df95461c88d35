"""CONNECT and authentication: how a connection becomes a client, pure.

`ConnectHandling` is the part of `channel.channel.Channel` that handles the first packet
and what answers it: the client id and the strings of CONNECT, the bridge prefix, the banned
table (`ChannelSettings.admit`), what CONNECT negotiates (`channel.negotiation`), the
`client.connect` and `client.authenticate` hooks, the will (its QoS and retain against the
offer, its topic against the ACL), MQTT 5.0 enhanced authentication before CONNACK and the
re-authentication of a connected client (`channel.enhanced_auth`). An accepted CONNECT
answers `SetReadTimeout` and `OpenSession`; a refused one a CONNACK with its code and a
close (`ChannelBase._refuse`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from channel.actions import (
    ExpireCredentials,
    OpenSession,
    Send,
    SetReadTimeout,
)
from channel.authorization import may_publish
from channel.base import ChannelBase, Phase
from channel.enhanced_auth import (
    AUTHENTICATION_DATA,
    AUTHENTICATION_METHOD,
    CONTINUE,
    REAUTHENTICATE,
    SUCCESS,
    AuthExchange,
    auth_packet,
)
from channel.negotiation import negotiate
from channel.problems import (
    user_properties,
    with_properties,
)
from core.client import BRIDGE_CLIENT_PREFIX, NO_LIMIT, ClientInfo
from core.message import Message
from core.reasons import DisconnectReason
from hooks.decisions import AuthContinue, AuthResult
from hooks.events import (
    AuthenticateRequest,
    ClientConnect,
)
from hooks.hookpoints import HookPoint
from mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    Will,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from mqtt.wire import has_control_characters

# One logger for the whole connection protocol, whichever module of it speaks: operators
# (and the pool's tests) know its lines by this name.
logger = logging.getLogger("channel.channel")


KEEPALIVE_GRACE = 1.5  # the server closes after 1.5 x the keep-alive of silence [MQTT-3.1.2-24]

_MAXIMUM_PACKET_SIZE = PropertyId.MAXIMUM_PACKET_SIZE
_NOT_AUTHORIZED = ReasonCode.NOT_AUTHORIZED


class ConnectHandling(ChannelBase):
    """CONNECT, the will, and (enhanced) authentication."""

    __slots__ = ()

    def _connect(self, packet: Connect) -> None:
        self.version = packet.protocol_version
        self._packet_limit = packet.properties.get(_MAXIMUM_PACKET_SIZE, NO_LIMIT)
        settings = self._settings
        client_id = packet.client_id
        connack_properties: dict[int, Any] = {}
        if not client_id:
            if self.version == 3 or (self.version == 4 and not packet.clean_start):
                # 3.1 needs 1..23 characters; 3.1.1 allows an empty id only with clean
                # session 1 [MQTT-3.1.3-8].
                self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client id")
                return
            client_id = f"auto-{uuid.uuid4().hex}"  # [MQTT-3.1.3-6]
            if self.version >= 5:
                connack_properties[PropertyId.ASSIGNED_CLIENT_IDENTIFIER] = client_id
        if self._strings_refused(packet, client_id) or self._bridge_refused(packet, client_id):
            return
        username = packet.username
        if settings.identity_as_username:
            if self._identity is None:
                self._refuse(
                    _NOT_AUTHORIZED,
                    "no client certificate (with a common name): this listener takes the "
                    "user name from it (use_identity_as_username)",
                )
                return
            username = self._identity
        terms = negotiate(packet, settings.offer)
        connack_properties.update(terms.connack_properties)
        client = ClientInfo(
            client_id=client_id,
            username=username,
            peer=self.peer,
            protocol_version=self.version,
            clean_start=packet.clean_start,
            keepalive=terms.keepalive,
            session_expiry=terms.session_expiry,
            receive_maximum=terms.receive_maximum,
            maximum_packet_size=terms.maximum_packet_size,
            topic_alias_maximum=terms.topic_alias_maximum,
            request_problem_information=terms.request_problem_information,
            properties=packet.properties,
        )
        self.client = client
        if self._banned(client):
            return
        hooks = self._hooks
        if hooks.has(HookPoint.CLIENT_CONNECT):
            hooks.run(
                HookPoint.CLIENT_CONNECT, ClientConnect(client=client, properties=packet.properties)
            )
        if self.version >= 5 and self._enhanced_auth_requested(packet, connack_properties):
            return
        # The broker's own bridge (in process, `settings.internal`) has nothing to prove.
        if not (settings.identity_as_username or settings.internal):
            # With the certificate's identity, the TLS handshake authenticated the client.
            result = hooks.authenticate(
                AuthenticateRequest(client=client, password=packet.password)
            )
            assert isinstance(result, AuthResult)  # no method: never AuthContinue (HookBus)
            if not result.allowed:
                assert result.reason is not None
                self._refuse(
                    result.reason.connack_v5,
                    f"authentication failed: {result.reason.value}",
                    result.user_properties,
                )
                return
            self._accept(packet, connack_properties, result.user_properties)
            self._expire_at(result)
            return
        self._accept(packet, connack_properties)

    def _accept(
        self,
        packet: Connect,
        connack_properties: dict[int, Any],
        pairs: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """The client is authenticated: check its will, then open its session. `pairs`: the
        authentication's User Properties for a 5.0 CONNACK, if they fit [MQTT-3.2.2-20]."""
        client = self.client
        assert client is not None
        if packet.will is not None and not self._accept_will(packet.will, client):
            return
        if pairs and self.version >= 5:
            # The session writes this CONNACK; its Session Present flag does not change the size.
            connack, _data = with_properties(
                ConnAck(properties=connack_properties),
                (user_properties(pairs),),
                self._packet_limit,
            )
            connack_properties = connack.properties
        self.phase = Phase.CONNECTING
        timeout = client.keepalive * KEEPALIVE_GRACE if client.keepalive else None
        self._actions.append(SetReadTimeout(timeout))
        self._actions.append(OpenSession(client, connack_properties))

    def _bridge_refused(self, packet: Connect, client_id: str) -> bool:
        """Refuse a client id under `BRIDGE_CLIENT_PREFIX` from outside (the broker's own
        bridges' sessions), and say so (True); note a 3.x bridge (the bridge bit of its
        CONNECT: `_subscribe`)."""
        if client_id.startswith(BRIDGE_CLIENT_PREFIX) and not self._settings.internal:
            self._refuse(
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                f"client id {client_id!r}: ids starting with {BRIDGE_CLIENT_PREFIX!r} belong to "
                "the broker's own bridges (choose another client id)",
            )
            return True
        self._bridge = packet.bridge
        return False

    def _strings_refused(self, packet: Connect, client_id: str) -> bool:
        """Refuse a CONNECT whose client id is over `max_client_id_length`, or (unless
        `allow_control_characters`) whose client id or will topic holds a control
        character, which a UTF-8 string SHOULD NOT (3.1.1 section 1.5.3, 5.0 section
        1.5.4), and say so (True). The id: CONNACK 0x85 (3.x: 0x02 identifier rejected).
        The will topic: 5.0 CONNACK 0x90, "the Will Topic Name is not malformed, but is not
        accepted by this Server" (3.2.2.2); no 3.x return code fits, so a 3.x client is
        closed."""
        settings = self._settings
        if len(client_id) > settings.max_client_id_length:
            self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
            return True
        if settings.allow_control_characters:
            return False
        if has_control_characters(packet.client_id):
            why = f"client id {packet.client_id!r} holds control characters (section 1.5.4)"
            self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, why)
            return True
        will = packet.will
        if will is None or not has_control_characters(will.topic):
            return False
        why = f"will topic {will.topic!r} holds control characters (section 1.5.4)"
        if self.version >= 5:
            self._refuse(ReasonCode.TOPIC_NAME_INVALID, why)
        else:
            self._violation(why)
        return True

    def _banned(self, client: ClientInfo) -> bool:
        """Refuse a banned client with CONNACK 0x8A (3.1.1: 0x05 not authorised)."""
        admit = self._settings.admit
        banned = admit(client) if admit is not None else None
        if banned is not None:
            self._refuse(ReasonCode.BANNED, banned)
        return banned is not None

    # ----- enhanced authentication (MQTT 5.0 section 4.12, channel.enhanced_auth) -------

    def _enhanced_auth_requested(self, packet: Connect, connack_properties: dict[int, Any]) -> bool:
        """If the 5.0 CONNECT names an Authentication Method, start the exchange and say so
        (True); also True when it is refused for Authentication Data without a method."""
        method = packet.properties.get(AUTHENTICATION_METHOD)
        data = packet.properties.get(AUTHENTICATION_DATA)
        if method is None:
            if data is None:
                return False
            self._refuse(
                ReasonCode.PROTOCOL_ERROR,
                "Authentication Data without an Authentication Method [MQTT-3.1.2-28]",
            )
            return True
        assert self.client is not None
        self._auth = AuthExchange(method, packet, connack_properties)
        request = AuthenticateRequest(
            client=self.client, password=packet.password, method=method, data=data
        )
        self._authenticated(self._hooks.authenticate(request))
        return True

    def _authenticated(self, result: AuthResult | AuthContinue) -> None:
        """Carry out the client.authenticate answer to a CONNECT with a method or to an AUTH
        before CONNACK."""
        exchange = self._auth
        assert exchange is not None and exchange.pending is not None
        if isinstance(result, AuthContinue):
            exchange.state = result.state
            self.phase = Phase.AUTHENTICATING
            self._actions.append(Send(auth_packet(CONTINUE, exchange.method, result.data)))
            return
        if not result.allowed:
            assert result.reason is not None
            self._refuse(
                result.reason.connack_v5,
                f"authentication failed: {result.reason.value}",
                result.user_properties,
            )
            return
        packet, connack_properties = exchange.pending, exchange.connack_properties
        connack_properties[AUTHENTICATION_METHOD] = exchange.method
        if result.data is not None:
            connack_properties[AUTHENTICATION_DATA] = result.data
        exchange.pending, exchange.connack_properties, exchange.state = None, {}, None
        if result.username is not None and self.client is not None:
            self.client = replace(self.client, username=result.username)
        self._accept(packet, connack_properties, result.user_properties)
        self._expire_at(result)

    def _expire_at(self, result: AuthResult) -> None:
        """An accepted client whose credentials expire is closed then (or at the time a
        re-authentication's credentials expire, which replaces it)."""
        if result.expires_at is not None and self.phase is not Phase.CLOSED:
            self._actions.append(ExpireCredentials(result.expires_at))

    def _auth_before_connack(self, packet: Packet) -> None:
        """A packet of a client whose CONNECT started an enhanced authentication."""
        exchange = self._auth
        assert exchange is not None and exchange.pending is not None and self.client is not None
        if isinstance(packet, Disconnect):
            self._close(DisconnectReason.CLIENT_DISCONNECT)
            return
        if not isinstance(packet, Auth):
            name = type(packet).__name__
            self._refuse(
                ReasonCode.PROTOCOL_ERROR,
                f"{name} before CONNACK of an enhanced authentication [MQTT-3.1.2-30]",
            )
            return
        why = exchange.mismatch(packet, CONTINUE)
        if why is not None:
            self._refuse(ReasonCode.PROTOCOL_ERROR, why)
            return
        request = AuthenticateRequest(
            client=self.client,
            password=None,
            method=exchange.method,
            data=packet.properties.get(AUTHENTICATION_DATA),
            state=exchange.state,
        )
        self._authenticated(self._hooks.authenticate(request))

    def _reauthenticate(self, packet: Auth) -> None:
        """AUTH from a connected client: a re-authentication (MQTT 5.0 section 4.12.1)."""
        self._flush_batch()
        exchange = self._auth
        client = self.client
        assert client is not None
        if exchange is None:
            self._violation("AUTH from a client that did not CONNECT with an Authentication Method")
            return
        why = exchange.mismatch(packet, CONTINUE if exchange.reauthenticating else REAUTHENTICATE)
        if why is not None:
            self._violation(why)
            return
        request = AuthenticateRequest(
            client=client,
            password=None,
            method=exchange.method,
            data=packet.properties.get(AUTHENTICATION_DATA),
            state=exchange.state if exchange.reauthenticating else None,
            reauthenticate=True,
        )
        result = self._hooks.authenticate(request)
        if isinstance(result, AuthContinue):
            exchange.reauthenticating, exchange.state = True, result.state
            self._actions.append(Send(auth_packet(CONTINUE, exchange.method, result.data)))
        elif result.allowed:
            exchange.reauthenticating, exchange.state = False, None
            self._actions.append(Send(auth_packet(SUCCESS, exchange.method, result.data)))
            self._expire_at(result)
            logger.info("%s re-authenticated (%s)", self._name(), exchange.method)
        else:
            assert result.reason is not None
            # DISCONNECT has no 0x86: a refusal is 0x87 unless the method is the problem
            # [MQTT-4.12.1-2].
            code = result.reason.connack_v5
            if code != ReasonCode.BAD_AUTHENTICATION_METHOD:
                code = _NOT_AUTHORIZED
            why = f"re-authentication failed: {result.reason.value}"
            logger.warning("closing %s: %s", self._name(), why)
            self._last_words(code, why)
            self._close(DisconnectReason.NOT_AUTHORIZED)

    def _accept_will(self, will: Will, client: ClientInfo) -> bool:
        """Keep the CONNECT's will for the close; False (CONNECT refused) if it asks for
        more than the broker offers or (5.0) the ACL denies it."""
        offer = self._settings.offer
        if will.qos > offer.maximum_qos or (will.retain and not offer.retain_available):
            # A will beyond what the broker offers is refused [MQTT-3.2.2-12/13].
            self._refuse(
                ReasonCode.QOS_NOT_SUPPORTED
                if will.qos > offer.maximum_qos
                else ReasonCode.RETAIN_NOT_SUPPORTED,
                f"will with QoS {will.qos}, retain {will.retain}: not offered ([mqtt])",
            )
            return False
        if self.version >= 5 and not may_publish(self._hooks, client, will.topic, will.qos):
            # 5.0 can say why [MQTT-3.2.2-8]; 3.x clients learn nothing, and their will
            # is checked again (and dropped) when it would be published.
            self._refuse(_NOT_AUTHORIZED, f"will on {will.topic!r} not authorised")
            return False
        self._will = Message(
            topic=will.topic,
            payload=will.payload,
            qos=will.qos,
            retain=will.retain,
            publisher=client.client_id,
            username=client.username,
            properties=will.properties,
        )
        return True
