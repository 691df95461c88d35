"""Locust MQTT scenarios; name one on the command line (docs/loadtest.md):

    locust -f loadtest/locustfile.py --headless -u 200 -r 50 -t 60s \\
        --host mqtt://127.0.0.1:1883 --csv loadtest/results/tmp/run telemetry

Each scenario is one Locust user class whose module-level name is the scenario name (Locust
selects users by that name, hence the lowercase class names). Roles inside a scenario follow
the user's number in this process (0, 1, 2, ...):

- `telemetry`: users 0, 50, 100, ... consume `<prefix>/devices/+/telemetry`; the others are
  devices publishing on `<prefix>/devices/<n>/telemetry` once a second, cycling `--mqtt-qos`.
- `fanout`: user 0 publishes on `<prefix>/fanout` ten times a second; all others subscribe.
- `chat`: every user subscribes to `<prefix>/chat/<n>` and sends to a random online peer.
- `connect_storm`: CONNECT, hold one second, DISCONNECT, reconnect; failures back off.
- `retained`: the first user stores `--mqtt-retained-topics` retained messages; every user
  then subscribes to `<prefix>/retained/#` and times the arrival of all of them (RETAINED).

Subscribers send PINGREQ every 5 s (reported as PING) to keep measuring their connection.
"""

from __future__ import annotations

import random
import time

import gevent.event
from locust import events, task
from locust.argument_parser import LocustArgumentParser

from loadtest.gevent_client import AckTimeoutError
from loadtest.mqtt_user import MqttSettings, MqttUser, parse_qos_levels
from mqtt import Publish

SUBSCRIBER_PING_INTERVAL = 5.0


@events.init_command_line_parser.add_listener
def add_mqtt_arguments(parser: LocustArgumentParser) -> None:
    """`--mqtt-*` options; each can also come from its LOCUST_MQTT_* environment variable."""
    defaults = MqttSettings()
    options: list[tuple[str, type, object, str]] = [
        ("username", str, None, "user name sent in CONNECT"),
        ("password", str, None, "password sent in CONNECT"),
        ("payload-size", int, defaults.payload_size, "bytes per PUBLISH payload (min 10)"),
        ("topic-prefix", str, defaults.topic_prefix, "first level of every topic"),
        ("keepalive", int, defaults.keepalive, "CONNECT keep-alive in seconds"),
        ("timeout", float, defaults.timeout, "seconds to wait for any acknowledgement"),
        ("interval", float, None, "seconds between a user's actions (scenario default)"),
        ("retained-topics", int, defaults.retained_topics, "retained scenario: topics"),
    ]
    for name, kind, default, help_text in options:
        parser.add_argument(
            f"--mqtt-{name}",
            type=kind,
            default=default,
            env_var=f"LOCUST_MQTT_{name.upper().replace('-', '_')}",
            help=help_text,
        )
    parser.add_argument(
        "--mqtt-qos",
        dest="mqtt_qos_levels",
        type=parse_qos_levels,
        default=",".join(map(str, defaults.qos_levels)),
        env_var="LOCUST_MQTT_QOS",
        help="QoS levels publishers cycle through, e.g. 0,1 or 2",
    )


class telemetry(MqttUser):  # noqa: N801 - the scenario name on Locust's command line
    """Many devices publish their own topic; a few consumers read all devices."""

    scenario = "telemetry"
    consumer_every = 50

    def on_start(self) -> None:
        self.is_consumer = self.number % self.consumer_every == 0
        self.device_topic = self.topic("devices", str(self.number), "telemetry")

    def on_connected(self) -> bool:
        if not self.is_consumer:
            return True
        consumer_filter = self.topic("devices", "+", "telemetry")
        return self.subscribe(
            [(consumer_filter, self.settings.subscribe_qos)], name=f"telemetry {consumer_filter}"
        )

    def pace(self) -> float:
        return SUBSCRIBER_PING_INTERVAL if self.is_consumer else super().pace()

    @task
    def act(self) -> None:
        if not self.ensure_connected():
            return
        if self.is_consumer:
            self.ping()
        else:
            self.publish(self.device_topic, self.next_qos())


class fanout(MqttUser):  # noqa: N801 - the scenario name on Locust's command line
    """One publisher (user 0), every other user subscribed to the same topic."""

    scenario = "fanout"
    default_interval = 0.1

    def on_start(self) -> None:
        self.is_publisher = self.number == 0
        self.shared_topic = self.topic("fanout")

    def on_connected(self) -> bool:
        if self.is_publisher:
            return True
        return self.subscribe(
            [(self.shared_topic, self.settings.subscribe_qos)], name=f"fanout {self.shared_topic}"
        )

    def pace(self) -> float:
        return super().pace() if self.is_publisher else SUBSCRIBER_PING_INTERVAL

    @task
    def act(self) -> None:
        if not self.ensure_connected():
            return
        if self.is_publisher:
            self.publish(self.shared_topic, self.next_qos())
        else:
            self.ping()


class chat(MqttUser):  # noqa: N801 - the scenario name on Locust's command line
    """Every user has an inbox topic and writes to the inbox of a random online peer."""

    scenario = "chat"
    online: set[int] = set()

    def on_start(self) -> None:
        self.inbox = self.topic("chat", str(self.number))

    def on_connected(self) -> bool:
        if not self.subscribe([(self.inbox, self.settings.subscribe_qos)], name="chat inbox"):
            return False
        chat.online.add(self.number)
        return True

    def on_stop(self) -> None:
        chat.online.discard(self.number)
        super().on_stop()

    @task
    def act(self) -> None:
        if not self.ensure_connected():
            return
        peers = [number for number in chat.online if number != self.number]
        if not peers:
            self.ping()
            return
        peer = random.choice(peers)
        self.publish(self.topic("chat", str(peer)), self.next_qos())


class connect_storm(MqttUser):  # noqa: N801 - the scenario name on Locust's command line
    """Connect, hold `--mqtt-interval` (1 s), disconnect, reconnect at once; back off on error."""

    scenario = "connect_storm"

    def pace(self) -> float:
        return super().pace() if self.client.connected else 0.0

    @task
    def act(self) -> None:
        if self.client.connected:
            self.client.disconnect()
        else:
            self.connect()


class retained(MqttUser):  # noqa: N801 - the scenario name on Locust's command line
    """Subscribe to many retained topics at once and time until all of them arrived."""

    scenario = "retained"
    default_interval = 5.0
    seeded = gevent.event.Event()
    seeding = False

    def on_start(self) -> None:
        self.retained_count = 0
        self.all_arrived = gevent.event.Event()
        self.retained_filter = self.topic("retained", "#")

    def on_connected(self) -> bool:
        if not retained.seeding:
            retained.seeding = True
            if not self._seed():
                retained.seeding = False
                return False
            retained.seeded.set()
        return True

    def _seed(self) -> bool:
        """Store one retained message per topic (QoS 1, so each is stored when acknowledged)."""
        return all(
            self.publish(self.topic("retained", str(index)), 1, retain=True, name="retained seed")
            for index in range(self.settings.retained_topics)
        )

    def on_message(self, packet: Publish) -> None:
        """Count retained messages [MQTT-3.3.1-8]; their send time is not this test's."""
        if packet.retain:
            self.retained_count += 1
            if self.retained_count >= self.settings.retained_topics:
                self.all_arrived.set()

    @task
    def act(self) -> None:
        if not self.ensure_connected():
            return
        expected = self.settings.retained_topics
        name = f"retained {expected} topics"
        timeout = self.settings.timeout
        if not retained.seeded.wait(timeout):
            self.fire("RETAINED", name, 0.0, 0, AckTimeoutError("retained topics not stored yet"))
            return
        self.retained_count = 0
        self.all_arrived.clear()
        start = time.perf_counter()
        if not self.subscribe([(self.retained_filter, self.settings.subscribe_qos)], name=name):
            return
        arrived = self.all_arrived.wait(timeout)
        elapsed_ms = (time.perf_counter() - start) * 1000
        if arrived:
            self.fire("RETAINED", name, elapsed_ms, expected * self.settings.payload_size)
        else:
            missing = AckTimeoutError(f"{self.retained_count} of {expected} in {timeout:g} s")
            self.fire("RETAINED", name, elapsed_ms, 0, missing)
        self.unsubscribe([self.retained_filter], name=name)
