"""plugins.auth_file against a live broker: password files from mosquitto_passwd and our CLI.

Each password file is made by a real tool (Debian's `mosquitto_passwd -b -c`, and
`python -m plugins.auth_file add --password-stdin`), the broker loads it through
`[[plugins]]`, and clients connect over TCP. CONNACK codes: 3.1.1 section 3.2.2.3 (0x04 bad
user name or password, 0x05 not authorized), 5.0 section 3.2.2.2 (0x86, 0x87); after a
refusal the server closes the connection [MQTT-3.2.2-5] (3.1.1) / [MQTT-3.2.2-7] (5.0).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from mqtt.packets import ConnAck
from mqtt.reason_codes import ConnackReturnCode, ReasonCode
from tests.support.broker_config import running_broker
from tests.support.broker_process import ROOT, BrokerProcess
from tests.support.clients import unique
from tests.support.raw_client import RawClient

MOSQUITTO_PASSWD = Path("/usr/bin/mosquitto_passwd")
USER = "sensor-owner"
PASSWORD = "s3cret with spaces & Ünïcode"
SUCCESS = 0x00
BAD_CREDENTIALS = {
    4: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
}
NOT_AUTHORIZED = {4: ConnackReturnCode.NOT_AUTHORIZED, 5: ReasonCode.NOT_AUTHORIZED}
VERSIONS = (4, 5)


def mosquitto_passwd_file(path: Path, user: str, password: str) -> None:
    if not MOSQUITTO_PASSWD.exists():
        pytest.skip(f"{MOSQUITTO_PASSWD} is absent (Debian package mosquitto): cannot test interop")
    command = [str(MOSQUITTO_PASSWD), "-b", "-c", str(path), user, password]
    subprocess.run(command, check=True, capture_output=True, timeout=10)


def auth_file_cli_add(path: Path, user: str, password: str) -> None:
    """`python -m plugins.auth_file add PATH USER --password-stdin` (the project's CLI)."""
    command = [sys.executable, "-m", "plugins.auth_file", "add", str(path), user]
    subprocess.run(
        [*command, "--password-stdin"],
        input=f"{password}\n".encode(),
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=20,
    )


PASSWORD_TOOLS: dict[str, Callable[[Path, str, str], None]] = {
    "mosquitto_passwd": mosquitto_passwd_file,
    "auth_file_cli": auth_file_cli_add,
}


def auth_config(
    *, broker_allows_anonymous: bool, plugin_allows_anonymous: bool | None = None
) -> str:
    """Broker TOML with auth_file reading `passwd` next to the config file."""
    plugin_option = ""
    if plugin_allows_anonymous is not None:
        plugin_option = f"allow_anonymous = {str(plugin_allows_anonymous).lower()}\n"
    return (
        '[store]\nkind = "memory"\n'
        f"[auth]\nallow_anonymous = {str(broker_allows_anonymous).lower()}\n"
        '[[plugins]]\nmodule = "plugins.auth_file"\npassword_file = "passwd"\n'
        f"{plugin_option}"
    )


@pytest.fixture(scope="module", params=sorted(PASSWORD_TOOLS))
def auth_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[BrokerProcess]:
    """A broker refusing anonymous clients, with USER in a file made by each tool in turn."""
    directory = tmp_path_factory.mktemp(request.param)
    PASSWORD_TOOLS[request.param](directory / "passwd", USER, PASSWORD)
    with running_broker(directory, auth_config(broker_allows_anonymous=False)) as broker:
        yield broker


def connack_code(
    broker: BrokerProcess, version: int, username: str | None, password: str | None
) -> tuple[int, bool]:
    """(CONNACK code, whether the broker then closed the connection) for one CONNECT."""
    client = RawClient(broker.host, broker.port, version=version)
    try:
        connack = client.connect(
            unique("auth"),
            username=username,
            password=password.encode() if password is not None else None,
        )
        assert isinstance(connack, ConnAck), connack
        closed = connack.reason_code != SUCCESS and client.is_closed_by_broker(3)
        return connack.reason_code, closed
    finally:
        client.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_right_password_is_accepted(auth_broker: BrokerProcess, version: int) -> None:
    assert connack_code(auth_broker, version, USER, PASSWORD) == (SUCCESS, False)


@pytest.mark.parametrize("version", VERSIONS)
def test_wrong_password_is_bad_credentials_then_close_MQTT_3_2_2_5(
    auth_broker: BrokerProcess, version: int
) -> None:
    assert connack_code(auth_broker, version, USER, PASSWORD + "x") == (
        BAD_CREDENTIALS[version],
        True,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_user_is_bad_credentials(auth_broker: BrokerProcess, version: int) -> None:
    assert connack_code(auth_broker, version, "nobody", PASSWORD) == (
        BAD_CREDENTIALS[version],
        True,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_user_name_without_password_is_bad_credentials(
    auth_broker: BrokerProcess, version: int
) -> None:
    assert connack_code(auth_broker, version, USER, None) == (BAD_CREDENTIALS[version], True)


@pytest.mark.parametrize("version", VERSIONS)
def test_anonymous_refused_is_not_authorized(auth_broker: BrokerProcess, version: int) -> None:
    assert connack_code(auth_broker, version, None, None) == (NOT_AUTHORIZED[version], True)


def paho_connect_reason(broker: BrokerProcess, username: str, password: str) -> str:
    """The reason paho 2.x reports in on_connect for a 3.1.1 CONNECT with these credentials."""
    reasons: list[Any] = []
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=unique("paho-auth"))
    client.username_pw_set(username, password)
    client.on_connect = lambda _c, _u, _flags, reason, _props: reasons.append(reason)
    client.connect(broker.host, broker.port, keepalive=30)
    deadline = time.monotonic() + 5
    try:
        while not reasons and time.monotonic() < deadline:
            client.loop(timeout=0.05)  # network loop in this thread: no thread to join
    finally:
        client.disconnect()
    assert reasons, "paho got no CONNACK in 5 s"
    return str(reasons[0])


def test_paho_client_with_right_and_wrong_password(auth_broker: BrokerProcess) -> None:
    assert paho_connect_reason(auth_broker, USER, PASSWORD) == "Success"
    assert paho_connect_reason(auth_broker, USER, "wrong") == "Bad user name or password"


def test_one_file_edited_by_both_tools(tmp_path: Path) -> None:
    """Our CLI adds a user to a mosquitto_passwd file; both users then authenticate."""
    mosquitto_passwd_file(tmp_path / "passwd", USER, PASSWORD)
    auth_file_cli_add(tmp_path / "passwd", "second-user", "other password")
    with running_broker(tmp_path, auth_config(broker_allows_anonymous=False)) as broker:
        assert connack_code(broker, 4, USER, PASSWORD) == (SUCCESS, False)
        assert connack_code(broker, 4, "second-user", "other password") == (SUCCESS, False)
        assert connack_code(broker, 4, "second-user", PASSWORD) == (BAD_CREDENTIALS[4], True)


@pytest.mark.parametrize(
    ("broker_allows", "plugin_allows", "anonymous_codes"),
    [
        (True, None, {4: SUCCESS, 5: SUCCESS}),  # plugin IGNOREs, [auth] decides
        (False, True, {4: SUCCESS, 5: SUCCESS}),  # the plugin's option wins
        (True, False, NOT_AUTHORIZED),
    ],
)
def test_anonymous_clients_follow_allow_anonymous(
    tmp_path: Path,
    broker_factory: Callable[..., BrokerProcess],
    broker_allows: bool,
    plugin_allows: bool | None,
    anonymous_codes: dict[int, int],
) -> None:
    auth_file_cli_add(tmp_path / "passwd", USER, PASSWORD)
    broker = broker_factory(
        auth_config(broker_allows_anonymous=broker_allows, plugin_allows_anonymous=plugin_allows)
    )
    for version in VERSIONS:
        code, _closed = connack_code(broker, version, None, None)
        assert code == anonymous_codes[version], (version, code)
        # Users in the file are checked whatever anonymous clients may do.
        assert connack_code(broker, version, USER, "wrong")[0] == BAD_CREDENTIALS[version]
        assert connack_code(broker, version, USER, PASSWORD)[0] == SUCCESS
