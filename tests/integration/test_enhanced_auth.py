"""MQTT 5.0 enhanced authentication over real sockets (section 4.12).

SCRAM-SHA-256 (plugins.auth_scram, credentials made by its command-line tool) is driven
with raw packets from the project's codec and the client side of `plugins.auth_scram.scram`,
so every packet of the exchange is checked as the broker sends it. Plain paho-mqtt 2.2
cannot answer an AUTH packet (its packet handler knows no AUTH); with it, these tests
complete a one-step method (the test plugin "TOKEN") and see CONNACK 0x8C for a method no
plugin speaks. SCRAM through paho, with the adapter `plugins.auth_scram.paho_client`, is
tests/integration/test_scram_paho.py.
"""

from __future__ import annotations

import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqtt.packets import Auth, ConnAck, Disconnect, PingReq, PingResp, Publish
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from plugins.auth_scram.scram import ScramClient
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import ROOT, BrokerProcess
from tests.support.clients import unique
from tests.support.raw_client import RawClient

METHOD = PropertyId.AUTHENTICATION_METHOD
DATA = PropertyId.AUTHENTICATION_DATA
REASON = PropertyId.REASON_STRING
SCRAM = "SCRAM-SHA-256"
USER, PASSWORD = "alice", "correct horse battery staple"


def scram_tool_add(path: Path, user: str, password: str) -> None:
    """`python -m plugins.auth_scram add PATH USER --password-stdin` (the shipped tool)."""
    subprocess.run(
        [sys.executable, "-m", "plugins.auth_scram", "add", str(path), user, "--password-stdin"],
        input=f"{password}\n".encode(),
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("enhanced-auth")
    scram_tool_add(directory / "scram-users", USER, PASSWORD)
    assert PASSWORD not in (directory / "scram-users").read_text()
    config = (
        '[store]\nkind = "memory"\n[auth]\nallow_anonymous = false\n'
        '[[plugins]]\nmodule = "plugins.auth_scram"\ncredentials_file = "scram-users"\n'
        '[[plugins]]\nmodule = "tests.support.test_plugins.token_auth"\ntoken = "let-me-in"\n'
    )
    with running_broker(directory, config) as process:
        yield process


def scram_connect(
    broker: BrokerProcess, password: str, user: str = USER, **connect: Any
) -> tuple[RawClient, ConnAck, ScramClient]:
    """Run the SCRAM exchange with raw packets; returns the client, CONNACK and SCRAM side."""
    client = RawClient(broker.host, broker.port, version=5)
    scram = ScramClient(user, password.encode())
    server_first = client.connect(
        unique("scram"), properties={METHOD: SCRAM, DATA: scram.first()}, **connect
    )
    assert isinstance(server_first, Auth), server_first
    assert server_first.reason_code == ReasonCode.CONTINUE_AUTHENTICATION
    assert server_first.properties[METHOD] == SCRAM
    final = scram.final(server_first.properties[DATA])
    client.send(Auth(ReasonCode.CONTINUE_AUTHENTICATION, properties={METHOD: SCRAM, DATA: final}))
    connack = client.expect()
    assert isinstance(connack, ConnAck), connack
    return client, connack, scram


def test_scram_success_and_the_server_proves_it_knows_the_key(broker: BrokerProcess) -> None:
    client, connack, scram = scram_connect(broker, PASSWORD)
    assert connack.reason_code == ReasonCode.SUCCESS
    assert connack.properties[METHOD] == SCRAM
    scram.verify(connack.properties[DATA])  # server-final checks out
    client.send(PingReq())
    assert client.expect() == PingResp()
    client.close()


def test_scram_wrong_password_gets_0x86_and_a_close(broker: BrokerProcess) -> None:
    client, connack, _scram = scram_connect(broker, "wrong horse")
    assert connack.reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    assert client.is_closed_by_broker()
    wait_for_log(broker, "SCRAM authentication of client")


def test_scram_unknown_user_fails_only_at_the_proof(broker: BrokerProcess) -> None:
    client, connack, _scram = scram_connect(broker, PASSWORD, user="mallory")
    assert connack.reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    client.close()


def test_scram_user_name_must_match(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port, version=5)
    scram = ScramClient(USER, PASSWORD.encode())
    connack = client.connect(
        unique("scram"), username="bob", properties={METHOD: SCRAM, DATA: scram.first()}
    )
    assert connack.reason_code == ReasonCode.NOT_AUTHORIZED
    assert connack.properties[REASON].startswith("authentication failed")  # [MQTT-3.2.2-19]
    client.close()


def test_publish_before_connack_is_a_protocol_error(broker: BrokerProcess) -> None:
    # [MQTT-3.1.2-30]: only AUTH or DISCONNECT until CONNACK.
    client = RawClient(broker.host, broker.port, version=5)
    scram = ScramClient(USER, PASSWORD.encode())
    assert isinstance(
        client.connect(unique("eager"), properties={METHOD: SCRAM, DATA: scram.first()}), Auth
    )
    client.send(Publish("t", b"too early", qos=0))
    assert client.expect() == ConnAck(
        False,
        ReasonCode.PROTOCOL_ERROR,
        {REASON: "Publish before CONNACK of an enhanced authentication [MQTT-3.1.2-30]"},
    )
    assert client.is_closed_by_broker()


def reauthenticate(client: RawClient, password: str) -> Any:
    """AUTH 0x19 with a new client-first, then the client-final; the broker's last answer."""
    scram = ScramClient(USER, password.encode())
    client.send(Auth(ReasonCode.RE_AUTHENTICATE, properties={METHOD: SCRAM, DATA: scram.first()}))
    server_first = client.expect()
    assert isinstance(server_first, Auth), server_first
    assert server_first.reason_code == ReasonCode.CONTINUE_AUTHENTICATION
    final = scram.final(server_first.properties[DATA])
    client.send(Auth(ReasonCode.CONTINUE_AUTHENTICATION, properties={METHOD: SCRAM, DATA: final}))
    answer = client.expect()
    if isinstance(answer, Auth):
        scram.verify(answer.properties[DATA])
    return answer


def test_reauthentication_success_keeps_the_connection(broker: BrokerProcess) -> None:
    client, connack, _scram = scram_connect(broker, PASSWORD)
    assert connack.reason_code == ReasonCode.SUCCESS
    answer = reauthenticate(client, PASSWORD)
    assert isinstance(answer, Auth) and answer.reason_code == ReasonCode.SUCCESS
    client.send(PingReq())
    assert client.expect() == PingResp()
    client.close()


def test_reauthentication_failure_disconnects_0x87(broker: BrokerProcess) -> None:
    client, connack, _scram = scram_connect(broker, PASSWORD)
    assert connack.reason_code == ReasonCode.SUCCESS
    answer = reauthenticate(client, "not the password")
    assert answer == Disconnect(  # [MQTT-4.12.1-2], saying why [MQTT-3.14.2-3]
        reason_code=ReasonCode.NOT_AUTHORIZED,
        properties={REASON: "re-authentication failed: bad_credentials"},
    )
    assert client.is_closed_by_broker()


def test_raw_unknown_method_is_0x8c(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port, version=5)
    connack = client.connect(unique("kerberos"), properties={METHOD: "GSSAPI", DATA: b"x"})
    assert connack == ConnAck(
        False,
        ReasonCode.BAD_AUTHENTICATION_METHOD,
        {REASON: "authentication failed: bad_authentication_method"},
    )
    assert client.is_closed_by_broker()


def paho_connack(
    broker: BrokerProcess, method: str, data: bytes, **connect: Any
) -> tuple[Any, Any]:
    """(reason, CONNACK properties) paho 2.x reports for a CONNECT with this method (and
    the CONNECT properties `connect`)."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, unique("paho"), protocol=paho.MQTTv5)
    client.on_connect = lambda _c, _u, _f, reason, properties: answers.put((reason, properties))
    properties = Properties(PacketTypes.CONNECT)
    properties.AuthenticationMethod = method
    properties.AuthenticationData = data
    for name, value in connect.items():
        setattr(properties, name, value)
    client.connect(broker.host, broker.port, properties=properties)
    client.loop_start()
    try:
        return answers.get(timeout=5)
    finally:
        client.disconnect()
        client.loop_stop()


def test_paho_one_step_method_success_and_failure(broker: BrokerProcess) -> None:
    reason, properties = paho_connack(broker, "TOKEN", b"let-me-in")
    assert reason == "Success"
    assert properties.AuthenticationMethod == "TOKEN"
    assert properties.AuthenticationData == b"token accepted"
    reason, _properties = paho_connack(broker, "TOKEN", b"guess")
    assert reason == "Bad user name or password"


def test_paho_gets_the_plugins_user_properties_on_connack(broker: BrokerProcess) -> None:
    # AuthResult.user_properties reach the CONNACK, in order; the plugin (token_auth) saw
    # the CONNECT's own User Properties and echoes the one named "echo".
    sent = [("echo", "hello"), ("other", "x")]
    reason, properties = paho_connack(broker, "TOKEN", b"let-me-in", UserProperty=sent)
    assert reason == "Success"
    assert properties.UserProperty == [("granted-by", "token_auth"), ("echo", "hello")]
    reason, properties = paho_connack(broker, "TOKEN", b"guess")
    assert reason == "Bad user name or password"
    assert properties.ReasonString == "authentication failed: bad_credentials"
    assert properties.UserProperty == [("hint", "ask the operator for a new token")]


def test_paho_unsupported_method_gets_bad_authentication_method(broker: BrokerProcess) -> None:
    reason, _properties = paho_connack(broker, "GSSAPI", b"")
    assert reason == "Bad authentication method"


def test_clients_without_a_method_are_still_decided_by_allow_anonymous(
    broker: BrokerProcess,
) -> None:
    # Both plugins IGNORE a CONNECT without a method; [auth] allow_anonymous is false.
    client = RawClient(broker.host, broker.port, version=5)
    assert client.connect(unique("anon")) == ConnAck(
        False, ReasonCode.NOT_AUTHORIZED, {REASON: "authentication failed: not_authorized"}
    )
    client.close()
