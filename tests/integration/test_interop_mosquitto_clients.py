"""Interoperability with Debian's mosquitto_pub / mosquitto_sub in MQTT 3.1, 3.1.1 and 5.

mosquitto_pub stores a retained QoS 1 message; mosquitto_sub (`-C 3 -W 5`) gets it on
subscribe, then two live messages, and exits 0 after the third.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.clients import unique

MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"

pytestmark = pytest.mark.skipif(
    shutil.which(MOSQUITTO_PUB) is None or shutil.which(MOSQUITTO_SUB) is None,
    reason="mosquitto_pub/mosquitto_sub not installed (Debian package mosquitto-clients)",
)
SUB_LIMITS = ("-C", "3", "-W", "5", "-v")  # exit after 3 messages or 5 s; print topics


def _broker_args(broker: BrokerProcess, version: str) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port), "-V", version]


def _pub(broker: BrokerProcess, version: str, topic: str, message: str, *flags: str) -> None:
    subprocess.run(
        [
            MOSQUITTO_PUB,
            *_broker_args(broker, version),
            "-t",
            topic,
            "-m",
            message,
            "-q",
            "1",
            *flags,
        ],
        check=True,
        timeout=5,
        capture_output=True,
    )


@pytest.mark.parametrize("version", ["mqttv31", "mqttv311", "mqttv5"])
def test_mosquitto_pub_and_sub_round_trip(broker: BrokerProcess, version: str) -> None:
    topic = unique(f"interop-{version}")
    _pub(broker, version, topic, "retained-1", "-r")
    subscriber = subprocess.Popen(
        [MOSQUITTO_SUB, *_broker_args(broker, version), "-t", topic, "-q", "1", *SUB_LIMITS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert subscriber.stdout is not None
        # The retained message arrives first, which also shows the subscription is active.
        assert subscriber.stdout.readline() == f"{topic} retained-1\n"
        _pub(broker, version, topic, "live-2")
        _pub(broker, version, topic, "live-3")
        out, err = subscriber.communicate(timeout=5)
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
            subscriber.wait()
    assert subscriber.returncode == 0, err
    assert out == f"{topic} live-2\n{topic} live-3\n"
