"""Loading plugins from the broker's TOML file, and reloading them on SIGHUP, in a real process.

A configuration the loader cannot honour (missing module, module without `Plugin`, unknown,
missing or wrong-typed option, unreadable file, a module listed twice) must stop the broker
within seconds with a non-zero exit code and one log line naming the plugin and the problem
(docs/plugins.md, "Enabling a plugin"). SIGHUP makes auth_file and acl_file re-read their
files: the new users and rules apply while already-connected clients stay connected.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqtt.packets import ConnAck, PubAck, Publish
from mqtt.reason_codes import SUBACK_FAILURE_V311
from tests.support.broker_config import running_broker, wait_for_log_lines
from tests.support.broker_process import ROOT, start_broker
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

STORE = '[store]\nkind = "memory"\n'
CONFIG_EXIT_CODE = 2  # actors.main: configuration errors
FAIL_FAST_SECONDS = 5.0
REFUSED = SUBACK_FAILURE_V311

BAD_PLUGIN_CONFIGS = {
    "missing_module": (
        '[[plugins]]\nmodule = "no_such_package.auth"\n',
        ["plugin no_such_package.auth:", "installed or on PYTHONPATH"],
    ),
    "module_without_plugin_class": (
        '[[plugins]]\nmodule = "tests.support.test_plugins"\n',
        ["plugin tests.support.test_plugins:", "no 'Plugin' class"],
    ),
    "unknown_option": (
        '[[plugins]]\nmodule = "plugins.auth_file"\npassword_file = "passwd"\n'
        'passwd_file = "passwd"\n',
        ["plugin plugins.auth_file: unknown option 'passwd_file'", "password_file"],
    ),
    "missing_required_option": (
        '[[plugins]]\nmodule = "plugins.acl_file"\n',
        ["plugin plugins.acl_file: option 'acl_file' is required"],
    ),
    "wrong_option_type": (
        '[[plugins]]\nmodule = "plugins.auth_file"\npassword_file = "passwd"\n'
        'allow_anonymous = "yes"\n',
        ["plugin plugins.auth_file: option 'allow_anonymous' must be bool"],
    ),
    "unreadable_file": (
        '[[plugins]]\nmodule = "plugins.auth_file"\npassword_file = "no-such-passwd"\n',
        ["plugin plugins.auth_file", "no-such-passwd"],
    ),
    "listed_twice": (
        '[[plugins]]\nmodule = "plugins.examples.connection_logger"\n'
        '[[plugins]]\nmodule = "plugins.examples.connection_logger"\n',
        ["plugin plugins.examples.connection_logger: listed twice"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PLUGIN_CONFIGS))
def test_bad_plugin_config_stops_the_broker_naming_the_plugin(tmp_path: Path, case: str) -> None:
    plugins, expected = BAD_PLUGIN_CONFIGS[case]
    (tmp_path / "passwd").write_text("", encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"broker exited with {CONFIG_EXIT_CODE}") as failure:
        start_broker(tmp_path, STORE + plugins)
    assert time.monotonic() - started < FAIL_FAST_SECONDS
    errors = [line for line in str(failure.value).splitlines() if " ERROR " in line]
    assert len(errors) == 1, str(failure.value)
    assert "plugin configuration error" in errors[0]
    for fragment in expected:
        assert fragment in errors[0], (fragment, errors[0])
    assert "ready: accepting" not in str(failure.value)


# ----- SIGHUP ---------------------------------------------------------------------------------

ACL_BEFORE = """\
user alice
topic readwrite alice/#
topic read legacy/#
"""
ACL_AFTER = """\
user alice
topic readwrite alice/#
topic read news/#

user carol
topic write news/#
"""
RELOAD_CONFIG = (
    STORE + "[auth]\nallow_anonymous = false\n"
    '[[plugins]]\nmodule = "plugins.auth_file"\npassword_file = "passwd"\n'
    '[[plugins]]\nmodule = "plugins.acl_file"\nacl_file = "acl"\n'
)


def add_user(password_file: Path, user: str, password: str) -> None:
    """The operator's way: `python -m plugins.auth_file add` (rewrites the file atomically)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "plugins.auth_file",
            "add",
            str(password_file),
            user,
            "--password-stdin",
        ],
        input=f"{password}\n".encode(),
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=20,
    )


def replace_file(path: Path, text: str) -> None:
    aside = path.with_name(f".{path.name}.new")
    aside.write_text(text, encoding="utf-8")
    os.replace(aside, path)


def login(broker_host: str, broker_port: int, user: str, password: str) -> tuple[int, RawClient]:
    client = RawClient(broker_host, broker_port)
    connack = client.connect(unique(user), username=user, password=password.encode())
    assert isinstance(connack, ConnAck), connack
    return connack.reason_code, client


def test_sighup_reloads_users_and_rules_keeping_connections(tmp_path: Path, workers: int) -> None:
    add_user(tmp_path / "passwd", "alice", "alice-pw")
    (tmp_path / "acl").write_text(ACL_BEFORE, encoding="utf-8")
    with running_broker(tmp_path, RELOAD_CONFIG) as broker:
        alice = connect_raw(
            broker, unique("alice"), username="alice", password=b"alice-pw", keepalive=0
        )
        suback = subscribe_raw(alice, 1, ("alice/#", 0), ("news/#", 0), ("legacy/#", 0))
        assert suback.reason_codes == [0, REFUSED, 0]
        code, carol = login(broker.host, broker.port, "carol", "carol-pw")
        assert code == 0x04  # not in the file yet
        carol.close()

        add_user(tmp_path / "passwd", "carol", "carol-pw")
        replace_file(tmp_path / "acl", ACL_AFTER)
        broker.process.send_signal(signal.SIGHUP)
        # Every worker of a pool reloads on its own: wait for each, as a client may be on any.
        wait_for_log_lines(broker, "plugin plugins.auth_file reloaded", workers)
        wait_for_log_lines(broker, "plugin plugins.acl_file reloaded", workers)

        code, carol = login(broker.host, broker.port, "carol", "carol-pw")
        assert code == 0
        # alice's connection from before the reload is still up and gets the new rules.
        suback = subscribe_raw(alice, 2, ("news/#", 1), ("legacy/#", 0))
        assert suback.reason_codes == [1, REFUSED]
        carol.send(Publish("news/today", b"reloaded", qos=1, packet_id=1))
        assert carol.expect() == PubAck(1)
        delivered = expect_publish(alice)
        assert (delivered.topic, delivered.payload) == ("news/today", b"reloaded")
        assert "closing client 'alice" not in broker.log()
        carol.close()
        alice.close()


def test_a_publish_decision_a_connection_kept_goes_with_a_sighup(
    tmp_path: Path, workers: int
) -> None:
    # Each connection keeps its publish decisions ([auth] acl_cache_ttl, 60 s by default):
    # a SIGHUP that changes the rules applies to the very next PUBLISH all the same.
    add_user(tmp_path / "passwd", "alice", "alice-pw")
    (tmp_path / "acl").write_text("user alice\ntopic readwrite alice/#\n", encoding="utf-8")
    with running_broker(tmp_path, RELOAD_CONFIG) as broker:
        alice = connect_raw(
            broker, unique("alice"), username="alice", password=b"alice-pw", version=5
        )
        for packet_id in (1, 2):  # the second answer is the kept one
            alice.send(Publish("alice/x", b"kept", qos=1, packet_id=packet_id))
            accepted = alice.expect()  # accepted; nobody subscribes: 0x10
            assert accepted == PubAck(packet_id, 0x10), accepted
        replace_file(tmp_path / "acl", "user alice\ntopic read alice/#\n")
        broker.process.send_signal(signal.SIGHUP)
        wait_for_log_lines(broker, "plugin plugins.acl_file reloaded", workers)
        alice.send(Publish("alice/x", b"denied now", qos=1, packet_id=3))
        answer = alice.expect()
        assert isinstance(answer, PubAck) and answer.reason_code == 0x87, answer  # [MQTT-3.4.2.1]
        alice.close()
