"""`python -m admin.ctl` against a live broker: tables, --json, and its exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest

from mqtt.packets import ConnAck, Publish
from mqtt.reason_codes import ReasonCode
from tests.support.admin import Admin, ctl, http_config
from tests.support.broker_config import running_broker
from tests.support.broker_process import ROOT
from tests.support.clients import connect_raw, subscribe_raw, unique
from tests.support.ports import free_port
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker, refusals_of


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[Admin]:
    port = free_port()
    with running_broker(tmp_path_factory.mktemp("ctl"), http_config(port)) as broker:
        yield Admin(broker, port)


def test_status_prints_the_figures(admin: Admin) -> None:
    result = ctl(admin, "status")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["node"] == "broker@127.0.0.1"
    figures = orjson.loads(ctl(admin, "--json", "status").stdout)
    assert figures["connections"] >= 0 and "messages_received" in figures


def test_clients_list_and_kick(admin: Admin, workers: int) -> None:
    """In a pool the client is on another worker than the API's (worker 0)."""
    client_id = unique("ctl")
    client, _ = connect_on_worker(admin.broker, client_id, workers - 1, workers, keepalive=42)
    listed = ctl(admin, "clients", "list", "--search", client_id)
    assert listed.returncode == 0, listed.stderr
    header, row, count = listed.stdout.splitlines()
    assert header.split()[:3] == ["CLIENTID", "NODE", "USERNAME"]
    node = admin.get("/api/v1/config")["node_name"]
    assert row.split()[:2] == [client_id, node] and "42" in row.split()
    assert count == "(1 of 1, page 1)"
    as_json = orjson.loads(ctl(admin, "--json", "clients", "list", "--search", client_id).stdout)
    assert [c["clientid"] for c in as_json["data"]] == [client_id]
    assert ctl(admin, "clients", "kick", client_id).returncode == 0
    assert client.is_closed_by_broker()
    gone = ctl(admin, "clients", "show", client_id)
    assert gone.returncode == 1
    assert "404" in gone.stderr and "not connected" in gone.stderr


def test_retained_delete(admin: Admin) -> None:
    topic = f"{unique('ctl-ret')}/t"
    publisher = connect_raw(admin.broker, unique("pub"))
    publisher.send(Publish(topic=topic, payload=b"keep", qos=1, retain=True, packet_id=1))
    publisher.expect()  # PUBACK: routed and stored
    shown = ctl(admin, "retained", "list", "--topic", topic)
    assert topic in shown.stdout and "keep" in shown.stdout
    assert ctl(admin, "retained", "delete", topic).returncode == 0
    late = connect_raw(admin.broker, unique("late"))
    subscribe_raw(late, 1, (topic, 0))
    late.expect_nothing(0.3)
    assert ctl(admin, "retained", "get", topic).returncode == 1
    publisher.close()
    late.close()


def test_ban_add_list_remove(admin: Admin, workers: int) -> None:
    client_id = unique("ctl-ban")
    added = ctl(admin, "ban", "add", "clientid", client_id, "--duration", "60", "--reason", "ops")
    assert added.returncode == 0, added.stderr
    for _attempt in range(40):  # refused by every worker of a pool
        client = RawClient(admin.broker.host, admin.broker.port, version=5)
        connack = client.connect(client_id)
        assert isinstance(connack, ConnAck) and connack.reason_code == ReasonCode.BANNED
        client.close()
        if workers == 1 or set(refusals_of(admin.broker, client_id)) == set(range(workers)):
            break
    else:
        raise AssertionError(f"40 refused CONNECTs of {client_id!r} missed a worker")
    listed = ctl(admin, "ban", "list")
    assert any(line.split()[:2] == ["clientid", client_id] for line in listed.stdout.splitlines())
    assert ctl(admin, "ban", "remove", "clientid", client_id).returncode == 0
    connect_raw(admin.broker, client_id).close()


def test_publish_and_plugins(admin: Admin) -> None:
    topic = unique("ctl-pub")
    subscriber = connect_raw(admin.broker, unique("sub"))
    subscribe_raw(subscriber, 1, (topic, 0))
    assert ctl(admin, "publish", topic, "from the shell").returncode == 0
    message = subscriber.expect()
    assert isinstance(message, Publish) and message.payload == b"from the shell"
    assert ctl(admin, "plugins", "reload").returncode == 0
    subscriber.close()


def test_exit_codes_for_refusal_and_no_broker(admin: Admin) -> None:
    refused = ctl(admin, "status", key="wrong-key")
    assert refused.returncode == 1
    assert "401" in refused.stderr
    env = {**os.environ, "ACTOR_MQTT_URL": f"http://127.0.0.1:{free_port()}"}
    unreachable = subprocess.run(
        [sys.executable, "-m", "admin.ctl", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert unreachable.returncode == 3
    assert "cannot reach the broker" in unreachable.stderr


def test_hash_key_matches_what_the_broker_accepts(admin: Admin) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "admin.ctl", "new-key"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    key_line, hash_line = made.stdout.splitlines()
    key = key_line.split()[1]
    hashed = subprocess.run(
        [sys.executable, "-m", "admin.ctl", "hash-key", key],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert hashed.stdout.strip() == hash_line.split()[1]
    assert hashed.stdout.startswith("sha256:")
