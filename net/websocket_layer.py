"""The WebSocket stream layer: MQTT over WebSocket, server side (MQTT 5.0 section 6, wsproto).

Handshake: an HTTP/1.1 upgrade request for the listener's `path` (query string ignored),
offering the subprotocol `mqtt` [MQTT-6.0.0-3] (or `mqttv3.1`, which MQTT 3.1 clients such
as paho with MQTTv31 send); the answer selects `mqtt` whenever it was offered
[MQTT-6.0.0-4]. Refusals are HTTP answers with a one-line text body saying why: 404 for
another path, 403 for an `Origin` header not in `allowed_origins` (an empty list allows every
origin; a request without `Origin` is not a browser's and is allowed), 400 for no MQTT
subprotocol and for anything that is not a WebSocket upgrade request (426 for another
WebSocket version).

Bytes the client sent right behind its upgrade request, without waiting for the 101 (a
CONNECT in the same write), are WebSocket frames: once the upgrade is accepted they are read
as such, not dropped. wsproto's server drops what follows the request in its buffer, so the
layer gives it the request alone: it keeps a copy of the request until its blank line
(bounded: wsproto refuses a head over 16 KiB) and feeds what follows once the 101 is sent.

Then: MQTT bytes travel in binary messages only; any other data message closes the
connection with close code 1003 [MQTT-6.0.0-1]. A message may hold several MQTT packets or
part of one [MQTT-6.0.0-2]: payloads are concatenated and the MQTT decoder frames them. Pings
are answered, a peer's close is answered and sets `peer_closed`, a malformed frame closes the
connection with the code wsproto chose (1002 protocol error, 1007 bad UTF-8...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import RemoteProtocolError

from net.stream_layers import LayerError

SUBPROTOCOLS = ("mqtt", "mqttv3.1")  # in order of preference [MQTT-6.0.0-4]
_HEAD_END = re.compile(b"\n\r?\n")  # where h11 ends a request head (h11._receivebuffer)


class WebSocketLayer:
    """One connection's WebSocket, server side; see the module docstring."""

    __slots__ = ("_allowed_origins", "_head", "_path", "_ws", "identity", "peer_closed", "ready")

    def __init__(self, path: str = "/mqtt", allowed_origins: Iterable[str] = ()) -> None:
        self._path = path
        self._allowed_origins = frozenset(origin.lower() for origin in allowed_origins)
        self._ws = WSConnection(ConnectionType.SERVER)
        self._head: bytes | None = b""  # the upgrade request so far; None once it is in
        self.ready = False
        self.peer_closed = False
        self.identity: str | None = None  # a WebSocket carries no identity

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        ws = self._ws
        if self.peer_closed or ws.state is ConnectionState.CLOSED:
            return b"", b""  # nothing may follow a close
        payload: list[bytes] = []
        replies: list[bytes] = []
        head = self._head
        if head is not None:  # the upgrade request is not complete yet
            end = _HEAD_END.search(head + data)
            if end is None:  # wsproto checks it as it comes, and bounds it
                self._feed(data, payload, replies)
                self._head = head + data
                return b"".join(payload), b"".join(replies)
            self._head = None
            cut = end.end() - len(head)  # where the head ends in `data`
            self._feed(data[:cut], payload, replies)
            data = data[cut:]  # frames sent before the 101 arrived
            if not data or not self.ready:
                return b"".join(payload), b"".join(replies)
        self._feed(data, payload, replies)
        return b"".join(payload), b"".join(replies)

    def _feed(self, data: bytes, payload: list[bytes], replies: list[bytes]) -> None:
        """Give wsproto `data` and act on its events (MQTT bytes into `payload`, answers
        into `replies`). Raises LayerError."""
        ws = self._ws
        try:
            ws.receive_data(data)
            events = list(ws.events())
        except RemoteProtocolError as error:
            # Only raised during the handshake: not an HTTP upgrade request.
            hint = error.event_hint
            status = hint.status_code if isinstance(hint, RejectConnection) else 400
            raise self._refuse(status, f"not a WebSocket upgrade request: {error}") from error
        for event in events:
            self._handle(event, payload, replies)

    def send(self, data: bytes) -> bytes:
        if self._ws.state is not ConnectionState.OPEN:
            return b""  # not upgraded yet, or closing: a WebSocket carries no more messages
        return self._ws.send(Message(data=data))

    def close(self) -> bytes:
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        return self._ws.send(CloseConnection(code=CloseReason.NORMAL_CLOSURE))

    def _handle(self, event: Event, payload: list[bytes], replies: list[bytes]) -> None:
        """Act on one wsproto event: MQTT bytes into `payload`, answers into `replies`."""
        ws = self._ws
        if isinstance(event, BytesMessage):
            payload.append(bytes(event.data))
        elif isinstance(event, Request):
            replies.append(self._accept(event))
        elif isinstance(event, Ping):
            replies.append(ws.send(event.response()))
        elif isinstance(event, TextMessage):
            reply = ws.send(
                CloseConnection(
                    code=CloseReason.UNSUPPORTED_DATA, reason="MQTT needs binary messages"
                )
            )
            raise LayerError(
                "WebSocket text message: MQTT must be sent in binary messages [MQTT-6.0.0-1]",
                b"".join(replies) + reply,
            )
        elif isinstance(event, CloseConnection):
            if ws.state is ConnectionState.REMOTE_CLOSING:  # the peer's close frame
                replies.append(ws.send(event.response()))
                self.peer_closed = True
            else:  # wsproto could not parse a frame: it reports it as a close to send
                reply = ws.send(CloseConnection(code=event.code, reason=event.reason))
                raise LayerError(
                    f"bad WebSocket frame: {event.reason} (close code {event.code})",
                    b"".join(replies) + reply,
                )
        # Pongs (to pings the broker never sends) are ignored.

    def _accept(self, request: Request) -> bytes:
        """The 101 answer to an acceptable upgrade request; raises LayerError otherwise."""
        path = request.target.split("?", 1)[0]
        if path != self._path:
            raise self._refuse(404, f"no MQTT WebSocket at {path!r}: use {self._path!r}")
        origin = _header(request, b"origin")
        if (
            self._allowed_origins
            and origin is not None
            and origin.lower() not in self._allowed_origins
        ):
            raise self._refuse(403, f"origin {origin!r} is not in allowed_origins")
        offered = [name for name in SUBPROTOCOLS if name in request.subprotocols]
        if not offered:
            raise self._refuse(
                400,
                f"no MQTT subprotocol offered (Sec-WebSocket-Protocol: "
                f"{', '.join(request.subprotocols) or 'none'}); offer 'mqtt' [MQTT-6.0.0-3]",
            )
        self.ready = True
        return self._ws.send(AcceptConnection(subprotocol=offered[0]))

    def _refuse(self, status: int, why: str) -> LayerError:
        """A LayerError whose reply is the HTTP answer `status`, with `why` as its body."""
        body = f"{why}\n".encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        reply = self._ws.send(RejectConnection(status_code=status, headers=headers, has_body=True))
        reply += self._ws.send(RejectData(data=body, body_finished=True))
        return LayerError(f"WebSocket upgrade refused with HTTP {status}: {why}", reply)


def _header(request: Request, name: bytes) -> str | None:
    """The value of header `name` (lower case) in the upgrade request, or None."""
    for key, value in request.extra_headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
