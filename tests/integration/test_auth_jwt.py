"""plugins.auth_jwt against a live broker: tokens signed in the test (HS256 with a secret,
RS256 with a key pair whose public half the broker reads), expired and not yet valid ones,
an `acl` claim deciding PUBLISH and SUBSCRIBE, and a token that expires during the
connection: 5.0 gets DISCONNECT 0x87 Not authorized [MQTT-4.13.1-1 lets a server say why],
3.1.1 is closed (it has no server DISCONNECT)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mqtt.packets import ConnAck, Disconnect, Publish
from mqtt.reason_codes import ConnackReturnCode, ReasonCode
from tests.support.broker_config import running_broker
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

SECRET = "a test secret that is long enough for HS256"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
BAD_CREDENTIALS = {
    4: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
}


@pytest.fixture(scope="module")
def jwt_broker(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("auth-jwt")
    public = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (directory / "rsa.pem").write_bytes(public)
    config = (
        '[store]\nkind = "memory"\n[overload]\nauth_failure_delay = 0.0\n'
        "[auth]\nallow_anonymous = false\n"
        f'[[plugins]]\nmodule = "plugins.auth_jwt"\nsecret = "{SECRET}"\npublic_key = "rsa.pem"\n'
    )
    with running_broker(directory, config) as broker:
        yield broker


def hs256(**claims: Any) -> str:
    return jwt.encode(claims, SECRET, algorithm="HS256")


def rs256(**claims: Any) -> str:
    return jwt.encode(claims, RSA_KEY, algorithm="RS256")


def open_client(
    broker: BrokerProcess, token: str, version: int = 4, client_id: str = ""
) -> tuple[RawClient, ConnAck]:
    client = RawClient(broker.host, broker.port, version=version)
    connack = client.connect(client_id or unique("jwt"), username="dev", password=token.encode())
    assert isinstance(connack, ConnAck), connack
    return client, connack


def connack_code(broker: BrokerProcess, token: str, version: int = 4) -> int:
    client, connack = open_client(broker, token, version)
    client.close()
    return int(connack.reason_code)


@pytest.mark.parametrize("version", [4, 5])
def test_signed_expired_and_not_yet_valid_tokens(jwt_broker: BrokerProcess, version: int) -> None:
    now = int(time.time())
    assert connack_code(jwt_broker, hs256(sub="dev", exp=now + 600), version) == 0
    assert connack_code(jwt_broker, rs256(sub="dev", exp=now + 600), version) == 0
    assert connack_code(jwt_broker, hs256(exp=now - 10), version) == BAD_CREDENTIALS[version]
    assert connack_code(jwt_broker, rs256(nbf=now + 600), version) == BAD_CREDENTIALS[version]
    forged = jwt.encode({"sub": "dev"}, "another secret of enough length!!", algorithm="HS256")
    assert connack_code(jwt_broker, forged, version) == BAD_CREDENTIALS[version]
    assert "token refused: Signature has expired" in jwt_broker.log()
    assert "token refused: The token is not yet valid (nbf)" in jwt_broker.log()


def test_the_acl_claim_decides_what_the_connection_may_do(jwt_broker: BrokerProcess) -> None:
    client_id = unique("acl")
    acl = [
        {"permission": "allow", "action": "all", "topic": "devices/${clientid}/#"},
        {"permission": "allow", "action": "subscribe", "topic": "news/#"},
    ]
    client, connack = open_client(jwt_broker, rs256(acl=acl), client_id=client_id)
    assert connack.reason_code == 0
    suback = subscribe_raw(client, 1, (f"devices/{client_id}/#", 0), ("news/+", 0), ("other/#", 0))
    assert list(suback.reason_codes) == [0, 0, 0x80]
    client.send(Publish(f"devices/{client_id}/t", b"mine", qos=0))
    client.send(Publish("news/today", b"not mine to write", qos=0))
    assert expect_publish(client).payload == b"mine"
    client.expect_nothing(within=0.3)
    client.close()


def test_a_5_0_client_is_disconnected_0x87_when_its_token_expires(
    jwt_broker: BrokerProcess,
) -> None:
    client, connack = open_client(jwt_broker, hs256(exp=int(time.time()) + 2), version=5)
    assert connack.reason_code == 0
    started = time.monotonic()
    disconnect = client.expect(timeout=6)
    assert isinstance(disconnect, Disconnect)
    assert disconnect.reason_code == ReasonCode.NOT_AUTHORIZED
    assert 0.5 < time.monotonic() - started < 4
    assert client.is_closed_by_broker()
    assert "credentials_expired" in jwt_broker.log()


def test_a_3_1_1_paho_client_is_closed_when_its_token_expires(jwt_broker: BrokerProcess) -> None:
    token = hs256(exp=int(time.time()) + 2)
    collector = PahoCollector(
        jwt_broker, unique("paho-jwt"), setup=lambda c: c.username_pw_set("dev", token)
    )
    try:
        assert str(collector.connect_reason) == "Success"
        assert collector.disconnected.wait(6), "still connected after the token expired"
    finally:
        collector.client.loop_stop()
