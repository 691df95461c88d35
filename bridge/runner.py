"""One bridge's life: connect to the remote broker, then to this broker as the session
`$bridge/<name>`, relay until either connection ends, wait, start over (docs/bridges.md).

A round: the remote connection (TCP or TLS, CONNECT, CONNACK), its SUBSCRIBE for the
incoming lines; then the local connection (`bridge.local_link`), whose session resumes
and sends what waited for the remote, in order, and its SUBSCRIBE for the outgoing lines
(No Local: what the bridge publishes here is not sent back; Retain As Published: the retain
flag crosses; Retain Handling 1: the retained messages come once, when the subscription is
new). Then three greenlets run until one ends: each side's reader, which relays what it
reads (`bridge.relay`) and writes the answers, and the remote's keep-alive. The local
connection exists only while the remote one does, so while the remote is away the session
is offline: it queues what is published for the bridge, in the store for QoS 1/2, up to
the bridge's queue bound (`queue_max_messages` / `queue_max_bytes`, oldest dropped, counted
and logged at most once per second as any session's).

Every failed attempt is one WARNING line saying why and when the next one comes
(`bridge.backoff`). Connected to another address than the first (unless `round_robin`), a
fourth greenlet checks every `PRIMARY_RETRY` seconds whether the first one takes a TCP
connection and, once it does, ends the round to move back to it, as Mosquitto's bridge does.
With `start_type = "once"` the bridge does not start over once its connection ended or every
address failed; with `"lazy"` it connects only once `threshold` messages wait in its session
(looked at every `LAZY_CHECK` seconds), and a further greenlet ends the round, cleanly, once
no message crossed for `idle_timeout` seconds. A message larger than the remote takes is
dropped by the relay, one WARNING line a second at most saying how many (`bridge.relay`,
"too_large"), and one above a 5.0 remote's Maximum QoS goes at that QoS. A remote that takes
no retained messages refuses a retained will (CONNACK 0x9A [MQTT-3.2.2-12]), one that takes
QoS 0 only a will at QoS 1 (0x9B): the bridge connects again at once with a will it takes.
The state is `$SYS/broker/connection/<name>/state`, retained, 1 while connected, 0
otherwise, and at the remote, as Mosquitto's bridges do, the same under the bridge's client
id there: its will says 0, and 1 is published once connected
(`notifications`, `notifications_local_only`, `notification_topic`).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent

from bridge.backoff import Backoff
from bridge.config import BridgeConfig
from bridge.link import Link, LinkClosedError
from bridge.relay import Relay, RelayCounts, RemoteLimits
from bridge.remote import ConnectError, answers, open_remote
from bridge.topics import Subscription, TopicMap
from core.client import BRIDGE_CLIENT_PREFIX
from mqtt.packets import Connect, Disconnect, PingReq, Publish, Subscribe, Unsubscribe, Will
from mqtt.packets import Subscription as SubscribeEntry
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

logger = logging.getLogger(__name__)

KEEPALIVE_GRACE = 1.5  # the remote is given up after this many keep-alive periods of silence
PRIMARY_RETRY = 5.0  # seconds between the checks of the first address (Mosquitto's 5)
TOO_LARGE_LOG_INTERVAL = 1.0  # seconds between the lines about messages too large
LAZY_CHECK = 1.0  # seconds between a lazy bridge's looks at its session and its traffic
SUBACK_FAILURE = 0x80
# The packet ids of the bridge's own requests at the remote, each answered before the relay
# passes on the local session's PUBLISHes, whose ids are then free [MQTT-2.2.1-3]
SUBSCRIBE_ID = 1
UNSUBSCRIBE_ID = 2
RETAIN_NOT_SUPPORTED = ReasonCode.RETAIN_NOT_SUPPORTED
QOS_NOT_SUPPORTED = ReasonCode.QOS_NOT_SUPPORTED
NEVER_EXPIRES = 0xFFFFFFFF


@dataclass(slots=True)
class BridgeStatus:
    """What the operations surface shows of a bridge."""

    name: str
    connected: bool = False
    address: str = ""  # where it is connected, or last tried
    connects: int = 0  # connections made since start
    last_error: str = ""


class WillRefusedError(ConnectError):
    """The remote refused the CONNECT for its will: retained (0x9A), or at QoS 1 (0x9B)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"the remote refused the will (0x{code:02x})")
        self.code = code


class RoundEndError(LinkClosedError):
    """The bridge ends the round itself (not a failure)."""


class MovingBackError(RoundEndError):
    """The first address answers again: the round ends to connect to it."""


class IdleError(RoundEndError):
    """A lazy bridge saw no message cross for `idle_timeout` seconds."""


class BridgeRunner:
    """Runs one bridge in a greenlet of its own; `open_local` makes a local connection."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        open_local: Callable[[], Any],
        waiting: Callable[[], int | None],
        tls: ssl.SSLContext | None,
        node_name: str,
        report_state: Callable[[str, bool], None],
        max_packet_size: int,
        receive_maximum: int,
    ) -> None:
        self.config = config
        self.client_id = BRIDGE_CLIENT_PREFIX + config.name
        self.remote_client_id = config.client_id or f"{node_name}.{config.name}"
        self._open_local = open_local
        # The messages waiting in the local session for the remote (None: the session is
        # not on this worker), for a lazy bridge
        self._waiting = waiting
        self._tls = tls
        self._report_state = report_state
        self._max_packet_size = max_packet_size
        self._receive_maximum = receive_maximum
        self._topics = TopicMap(config.topics)
        self.status = BridgeStatus(config.name)
        self.counts = RelayCounts()  # since start, over every connection
        self._links: list[Link] = []
        self._remote: Link | None = None  # this round's link to the remote, once open
        # The window toward the remote of this round: `max_inflight`, capped by the Receive
        # Maximum of a 5.0 remote [MQTT-3.3.4-7]; the local session's Receive Maximum.
        self._window = config.max_inflight
        self._limits = RemoteLimits()  # what this round's remote takes
        # The state at the remote is retained, unless the remote refused that once or the
        # bridge sends nothing retained (`outgoing_retain`)
        self._state_retained = config.outgoing_retain
        self._state_qos = 1  # the will's QoS, unless the remote refused it
        self._too_large_logged = (0.0, 0)  # when the last line about them was, and the count
        self._greenlet: gevent.Greenlet[..., Any] | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._greenlet is not None

    def start(self) -> None:
        if self._greenlet is not None:
            return
        self._stopping = False
        self._report_state(self.config.name, False)
        self._greenlet = gevent.spawn(self._run)

    def stop(self, timeout: float = 3.0) -> None:
        """End the bridge: its state "0" at the remote, then DISCONNECT on both connections
        (the local session stays, offline). Waits up to `timeout` seconds for the round to
        end; never blocks the caller's greenlet longer."""
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is None:
            return
        self._stopping = True
        self._leave()
        greenlet.join(timeout)
        greenlet.kill(block=False)  # its round's end said "0" if it was connected

    # ----- the rounds ---------------------------------------------------------------

    def _run(self) -> None:
        config = self.config
        backoff = Backoff(
            config.addresses,
            config.reconnect_delay,
            config.max_reconnect_delay,
            round_robin=config.round_robin,
        )
        while not self._stopping:
            if config.start_type == "lazy" and not self._await_threshold():
                return  # stopped while waiting
            address = backoff.address
            self.status.address = address
            try:
                remote = self._connect_remote(address)
            except (ConnectError, LinkClosedError) as error:
                self._end_round()  # closes the attempt's socket, if it got one
                wait = backoff.failed()
                if self._once_over(wait, f"cannot connect to {address}: {error}"):
                    return
                self._failed(f"cannot connect to {address}: {error}", wait)
                gevent.sleep(wait)
                continue
            backoff.connected()
            try:
                self._serve(remote, address, on_first=backoff.at_first)
            except MovingBackError as error:
                backoff.lost()  # to the first address, at once
                logger.info("bridge %r: %s", config.name, error)
            except IdleError as error:
                backoff.lost()  # the next round starts from the first address
                self._leave()
                logger.info(
                    "bridge %r: %s: disconnected until %d messages wait for the remote "
                    "(start_type lazy)",
                    config.name,
                    error,
                    config.threshold,
                )
            except LinkClosedError as error:
                if not self._stopping:
                    wait = backoff.lost()
                    if self._once_over(wait, f"connection lost: {error}"):
                        return
                    self._failed(f"connection lost: {error}", wait)
                    gevent.sleep(wait)
            except Exception:
                logger.exception("bridge %r: failed (a broker bug); starting over", config.name)
                gevent.sleep(backoff.lost())
            finally:
                self._end_round()

    def _once_over(self, wait: float, why: str) -> bool:
        """With `start_type = "once"`: whether the bridge is done (its connection ended, or
        a whole round of attempts failed: `wait` above 0), said in one line."""
        if self.config.start_type != "once" or wait == 0:
            return False
        self.status.last_error = why
        logger.warning(
            "bridge %r: %s; start_type is once: no further attempt until the broker restarts",
            self.config.name,
            why,
        )
        return True

    def _await_threshold(self) -> bool:
        """A lazy bridge: wait until `threshold` messages wait for the remote in the local
        session (False: the bridge was stopped meanwhile). A session that does not exist
        yet is made first (an in-process connection and its subscriptions, no remote), so
        that messages queue for the bridge; one that is not on this worker is brought here
        by connecting at once."""
        if self._waiting() is None:
            self._make_local_session()
        while True:
            if self._stopping:
                return False
            waiting = self._waiting()
            if waiting is None or waiting >= self.config.threshold:
                break
            gevent.sleep(LAZY_CHECK)
        logger.info(
            "bridge %r: %s messages wait for the remote (threshold %d): connecting "
            "(start_type lazy)",
            self.config.name,
            "its session's" if waiting is None else waiting,
            self.config.threshold,
        )
        return True

    def _make_local_session(self) -> None:
        try:
            self._connect_local().close(Disconnect())
        except LinkClosedError as error:
            logger.warning(
                "bridge %r: could not make its session here: %s", self.config.name, error
            )
        finally:
            self._links.clear()

    def _leave(self) -> None:
        """End the round cleanly: the state "0" at the remote (a DISCONNECT keeps the will
        from saying it), then DISCONNECT on both sides."""
        state = self._remote_state_topic()
        if self._remote is not None and state is not None:
            retain = self._state_retained and self._limits.retain
            with contextlib.suppress(LinkClosedError):
                self._remote.send([Publish(state, b"0", qos=0, retain=retain)])
        for link in self._links:
            link.close(Disconnect())

    def _remote_state_topic(self) -> str | None:
        """Where the bridge's state goes at the remote; None: not there."""
        config = self.config
        if config.notifications and not config.notifications_local_only:
            return config.state_topic(self.remote_client_id)
        return None

    def _failed(self, why: str, wait: float) -> None:
        self.status.last_error = why
        logger.warning("bridge %r: %s; next attempt in %.1f s", self.config.name, why, wait)

    def _connect_remote(self, address: str) -> Link:
        """The link to `address`, connected; a will the remote refuses is made plainer and
        sent again at once: not retained, then at QoS 0 [MQTT-3.2.2-12]."""
        while True:
            try:
                return self._connect_remote_once(address)
            except WillRefusedError as refused:
                if refused.code == RETAIN_NOT_SUPPORTED:
                    self._state_retained = False
                    what = "retained messages: the bridge's state there is not retained"
                else:
                    self._state_qos = 0
                    what = "QoS 1: the bridge's will there is at QoS 0"
                logger.info(
                    "bridge %r: %s takes no %s from now on", self.config.name, address, what
                )

    def _connect_remote_once(self, address: str) -> Link:
        config = self.config
        sock = open_remote(address, self._tls, config.connect_timeout, config.bind_address)
        # From a 3.1.1 remote the plain acknowledgements are passed on as bytes.
        link = Link(
            sock,
            config.version,
            f"remote broker {address}",
            self._max_packet_size,
            raw_acks=config.version < 5,
        )
        self._links.append(link)
        self._remote = link
        properties: dict[int, Any] = {}
        if config.version >= 5:
            properties[PropertyId.RECEIVE_MAXIMUM] = self._receive_maximum
            if not config.clean_start and config.session_expiry:
                properties[PropertyId.SESSION_EXPIRY_INTERVAL] = config.session_expiry
        # Mosquitto's remote notifications: the remote publishes "0" when the bridge goes,
        # and the bridge says "1" once connected (QoS 0: the relay's packet ids at the
        # remote are the local session's).
        state = self._remote_state_topic()
        connect = Connect(
            client_id=self.remote_client_id,
            protocol_version=config.version,
            clean_start=config.clean_start,
            keepalive=config.keepalive,
            username=config.username or None,
            password=config.password.encode() if config.password else None,
            properties=properties,
            bridge=config.try_private,
            will=None
            if state is None
            else Will(state, b"0", self._state_qos, self._state_retained),
        )
        connack = link.handshake(connect, config.connect_timeout)
        code = connack.reason_code
        if state and (
            (code == RETAIN_NOT_SUPPORTED and self._state_retained)
            or (code == QOS_NOT_SUPPORTED and self._state_qos)
        ):
            link.close()
            raise WillRefusedError(code)
        if connack.reason_code:
            link.close()
            raise ConnectError(
                f"CONNACK refused the bridge with code 0x{connack.reason_code:02x}"
                + _reason_string(connack.properties)
                + " (check client_id, username and password"
                + (
                    ""
                    if state is None
                    else f", and that the remote lets the bridge leave its will on {state!r}: "
                    "if not, set notifications_local_only = true"
                )
                + ")"
            )
        self._window = session_window(config.max_inflight, connack.properties)
        self._limits = RemoteLimits.of(
            config.max_packet_size, config.outgoing_retain, connack.properties
        )
        subscriptions = self._topics.remote_subscriptions()
        if subscriptions:
            self._subscribe(link, subscriptions, no_local=config.version >= 5)
        stale = self._topics.remote_unsubscriptions()
        if stale and config.attempt_unsubscribe:
            link.unsubscribe(Unsubscribe(UNSUBSCRIBE_ID, stale), config.connect_timeout)
        if state is not None:
            retain = self._state_retained and self._limits.retain
            link.send([Publish(state, b"1", qos=0, retain=retain)])
        return link

    def _connect_local(self) -> Link:
        # Toward a 3.1.1 remote the local session's PUBLISHes are passed on as bytes.
        raw = self.config.version < 5
        link = Link(self._open_local(), 5, "this broker", self._max_packet_size, raw_publish=raw)
        self._links.append(link)
        connect = Connect(
            client_id=self.client_id,
            protocol_version=5,
            clean_start=False,
            keepalive=0,
            username=self.config.local_username or None,
            properties={
                PropertyId.SESSION_EXPIRY_INTERVAL: NEVER_EXPIRES,
                PropertyId.RECEIVE_MAXIMUM: self._window,
            },
        )
        connack = link.handshake(connect, self.config.connect_timeout)
        if connack.reason_code:
            raise LinkClosedError(
                f"this broker refused the bridge's session {self.client_id!r} with code "
                f"0x{connack.reason_code:02x}{_reason_string(connack.properties)}"
            )
        subscriptions = self._topics.local_subscriptions()
        if subscriptions:
            self._subscribe(link, subscriptions, no_local=True)
        return link

    def _subscribe(self, link: Link, subscriptions: list[Subscription], no_local: bool) -> None:
        entries = [
            SubscribeEntry(
                s.topic_filter,
                s.qos,
                no_local=no_local,
                retain_as_published=link.version >= 5,
                retain_handling=1 if link.version >= 5 else 0,
            )
            for s in subscriptions
        ]
        suback = link.request(Subscribe(SUBSCRIBE_ID, entries), self.config.connect_timeout)
        for entry, code in zip(entries, suback.reason_codes, strict=False):
            if code >= SUBACK_FAILURE:
                logger.warning(
                    "bridge %r: %s refused the subscription to %r (code 0x%02x): nothing on it "
                    "crosses the bridge (check that broker's ACL for the bridge's user)",
                    self.config.name,
                    link.peer,
                    entry.topic_filter,
                    code,
                )

    def _serve(self, remote: Link, address: str, *, on_first: bool) -> None:
        local = self._connect_local()
        relay = Relay(self._topics, self.config.version, self.counts, self._limits)
        self.status.connected = True
        self.status.connects += 1
        self.status.last_error = ""
        self._report_state(self.config.name, True)
        logger.info(
            "bridge %r: connected to %s (MQTT %s) as %r",
            self.config.name,
            address,
            self.config.protocol_version,
            self.remote_client_id,
        )
        workers: list[gevent.Greenlet[Any, str | RoundEndError]] = [
            gevent.spawn(self._until_closed, self._pump, local, remote, relay, True),
            gevent.spawn(self._until_closed, self._pump, remote, local, relay, False),
        ]
        if self.config.keepalive:
            workers.append(gevent.spawn(self._until_closed, self._keepalive, remote))
        if not on_first and not self.config.round_robin:
            workers.append(gevent.spawn(self._until_closed, self._watch_first, address))
        if self.config.start_type == "lazy":
            workers.append(gevent.spawn(self._until_closed, self._watch_idle))
        try:
            done = gevent.wait(workers, count=1)
        finally:
            gevent.killall(workers, block=False)
        ended = done[0]
        assert isinstance(ended, gevent.Greenlet)
        if ended.exception is not None:
            raise ended.exception
        if isinstance(ended.value, RoundEndError):
            raise ended.value
        raise LinkClosedError(ended.value)

    @staticmethod
    def _until_closed(work: Callable[..., None], *args: Any) -> str | RoundEndError:
        """Run `work` until its link closes; why it closed."""
        try:
            work(*args)
        except RoundEndError as error:
            return error
        except LinkClosedError as error:
            return str(error)
        return "a relay ended"

    def _pump(self, source: Link, other: Link, relay: Relay, from_local: bool) -> None:
        """Read `source` and relay what it sends, until it closes (raises LinkClosedError)."""
        handle = relay.from_local if from_local else relay.from_remote
        while True:
            packets = source.receive()
            for packet in packets:
                if isinstance(packet, Disconnect):
                    raise LinkClosedError(
                        f"{source.peer} sent DISCONNECT (reason 0x{packet.reason_code:02x})"
                        + _reason_string(packet.properties)
                    )
            relayed = handle(packets)
            if from_local and relay.counts.too_large != self._too_large_logged[1]:
                self._log_too_large(relay.counts.too_large)
            local, remote = (source, other) if from_local else (other, source)
            remote.send(relayed.to_remote)
            local.send(relayed.to_local)

    def _log_too_large(self, count: int) -> None:
        """One line a second at most about the messages dropped as too large."""
        now = time.monotonic()
        last_at, last_count = self._too_large_logged
        if now - last_at < TOO_LARGE_LOG_INTERVAL:
            return
        self._too_large_logged = (now, count)
        logger.warning(
            "bridge %r: %d message(s) larger than %d bytes, the most %s takes, were dropped "
            "(%d in all; raise max_packet_size, or the remote's maximum packet size)",
            self.config.name,
            count - last_count,
            self._limits.max_packet_size,
            self.status.address,
            count,
        )

    def _watch_first(self, address: str) -> None:
        """Connected to `address`, not the first: end the round once the first answers."""
        first = self.config.addresses[0]
        while True:
            gevent.sleep(PRIMARY_RETRY)
            if answers(first, self.config.connect_timeout, self.config.bind_address):
                raise MovingBackError(
                    f"the first address {first} answers again: leaving {address} for it"
                )

    def _watch_idle(self) -> None:
        """A lazy bridge: end the round once no message crossed for `idle_timeout` s."""
        timeout = self.config.idle_timeout
        counts = self.counts
        crossed = (counts.sent, counts.received)
        quiet_since = time.monotonic()
        while True:
            gevent.sleep(min(LAZY_CHECK, timeout / 2))
            now = time.monotonic()
            if (counts.sent, counts.received) != crossed:
                crossed = (counts.sent, counts.received)
                quiet_since = now
            elif now - quiet_since >= timeout:
                raise IdleError(f"no message crossed for {timeout:g} s")

    def _keepalive(self, remote: Link) -> None:
        interval = self.config.keepalive
        while True:
            gevent.sleep(interval / 2)
            now = time.monotonic()
            if now - remote.last_received > interval * KEEPALIVE_GRACE:
                raise LinkClosedError(
                    f"nothing from {remote.peer} for {interval * KEEPALIVE_GRACE:.0f} s "
                    "(keep-alive)"
                )
            if now - remote.last_sent >= interval / 2:
                remote.send([PingReq()])

    def _end_round(self) -> None:
        for link in self._links:
            link.close()
        self._links.clear()
        self._remote = None
        if self.status.connected:
            self.status.connected = False
            self._report_state(self.config.name, False)


def session_window(max_inflight: int, connack_properties: dict[int, Any]) -> int:
    """The local session's Receive Maximum: what it may have in flight, and so the bridge
    at the remote. `max_inflight`, lowered to a 5.0 remote's Receive Maximum [MQTT-3.3.4-7]
    (the relay passes each PUBLISH on at once, with its packet id)."""
    remote_maximum: int = connack_properties.get(PropertyId.RECEIVE_MAXIMUM, 65535)
    return min(max_inflight, remote_maximum)


def _reason_string(properties: dict[int, Any]) -> str:
    text = properties.get(PropertyId.REASON_STRING)
    return f" ({text})" if text else ""
