"""Operations pieces in-process: load averages and the $SYS tree, the latency histogram, the
admin authenticator, the [http]/[sys]/[flapping] configuration and the bans file."""

from __future__ import annotations

import math
import time
from pathlib import Path

import orjson
import pytest

from actors.admission import Admission
from actors.config import ConfigError, FlappingConfig, HttpConfig, load_config
from actors.figures import Figures
from actors.sys_topics import LoadAverages, load_counters, sys_values
from admin.auth import Authenticator, AuthSetupError, hash_key, new_key
from core.bans import Ban, BanKind
from core.client import ClientInfo
from core.latency import LatencyHistogram
from plugins.auth_file import hash_password
from tests.support.admin import basic


def figures(**changes: object) -> Figures:
    values: dict[str, object] = {
        "worker": 0,
        "uptime": 12.7,
        "connections": 3,
        "connections_total": 9,
        "connections_max": 5,
        "connected_by_version": {3: 0, 4: 2, 5: 1},
        "connections_by_listener": {"tcp 127.0.0.1:1883": 4},
        "sessions": 7,
        "messages_received": 100,
        "received_by_qos": [60, 40, 0],
        "messages_sent": 250,
        "messages_dropped": 4,
        "deliveries_dropped": 6,
        "dropped_by_reason": {},
        "bytes_received": 1000,
        "bytes_sent": 2000,
        "subscriptions": 11,
        "topic_filters": 8,
        "retained": 2,
        "queued": 0,
        "inflight": 0,
        "banned": 0,
        "connects_banned": 0,
        "store_bytes": 4096,
        "store_commits": None,
    }
    values.update(changes)
    return Figures(**values)  # type: ignore[arg-type]


def test_sys_values_use_mosquittos_names() -> None:
    values = dict(sys_values(figures(), LoadAverages(), "v1", 123))
    assert values["$SYS/broker/clients/connected"] == "3"
    assert values["$SYS/broker/clients/disconnected"] == "4"  # 7 sessions, 3 connected
    assert values["$SYS/broker/clients/total"] == "7"
    assert values["$SYS/broker/clients/maximum"] == "5"
    assert values["$SYS/broker/publish/messages/dropped"] == "10"
    assert values["$SYS/broker/retained messages/count"] == "2"
    assert values["$SYS/broker/uptime"] == "12 seconds"
    assert values["$SYS/broker/heap/current"] == "123"
    assert values["$SYS/broker/version"] == "v1"


def test_load_averages_approach_a_steady_rate() -> None:
    loads = LoadAverages()
    loads.update({"messages/received": 0}, 0.0)
    assert loads.averages["messages/received"]["1min"] == 0.0
    total = 0
    for _ in range(60):  # ten minutes at 10 messages a second, updated every 10 s
        total += 100
        loads.update({"messages/received": total}, 10.0)
    per_minute = loads.averages["messages/received"]
    assert per_minute["1min"] == pytest.approx(600, rel=0.01)
    assert per_minute["5min"] == pytest.approx(600 * (1 - math.exp(-600 / 300)), rel=0.01)
    assert per_minute["1min"] > per_minute["5min"] > per_minute["15min"] > 0
    values = dict(sys_values(figures(), loads, "v", 0))
    assert values["$SYS/broker/load/messages/received/1min"] == f"{per_minute['1min']:.2f}"
    assert set(load_counters(figures())) >= {"messages/received", "bytes/sent"}


def test_latency_histogram_buckets_are_cumulative() -> None:
    histogram = LatencyHistogram(bounds=(0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.005, 2.0):
        histogram.observe(seconds)
    assert histogram.cumulative() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert histogram.total == pytest.approx(2.0065)


def test_authenticator_keys_and_password_file(tmp_path: Path) -> None:
    passwords = tmp_path / "passwd"
    passwords.write_text(f"ops:{hash_password(b'pw').encode()}\n")
    auth = Authenticator(HttpConfig(api_keys=(hash_key("k1"),), password_file=str(passwords)))
    assert auth.allowed("Bearer k1", None)
    assert auth.allowed(None, "k1")
    assert not auth.allowed("Bearer k2", None)
    assert not auth.allowed(None, None)
    assert auth.allowed(basic("ops", "pw")["Authorization"], None)
    assert auth.allowed(basic("ops", "pw")["Authorization"], None)  # remembered
    assert not auth.allowed(basic("ops", "nope")["Authorization"], None)
    assert not auth.allowed(basic("nobody", "pw")["Authorization"], None)
    assert auth.allowed(basic("anyone", "k1")["Authorization"], None)
    assert not auth.allowed("Basic !!!", None)
    assert not auth.allowed("Digest abc", None)


def test_authenticator_refuses_unhashed_keys(tmp_path: Path) -> None:
    with pytest.raises(AuthSetupError, match="sha256:<64 hex digits>"):
        Authenticator(HttpConfig(api_keys=("plain-key",)))
    key_file = tmp_path / "keys"
    key_file.write_text(f"# ops team\n{hash_key('k3')}\n")
    assert Authenticator(HttpConfig(api_key_file=str(key_file))).allowed("Bearer k3", None)


def test_config_sections(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        '[http]\nport = 0\napi_keys = ["sha256:ab"]\npassword_file = "p"\n'
        "[sys]\ninterval = 2.5\npresence_events = true\n"
        "[flapping]\nmax_connects = 10\nwindow = 30\nban_time = 60\n"
    )
    config = load_config(path)
    assert config.http.port == 0
    assert config.http.api_keys == ("sha256:ab",)
    assert config.http.password_file == str(tmp_path / "p")
    assert (config.sys.interval, config.sys.presence_events) == (2.5, True)
    assert config.flapping == FlappingConfig(10, 30.0, 60.0)
    assert load_config(path, {"http_port": 18084}).http.port == 18084


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[http]\nport = 70000\n", "port must be 0..65535"),
        ("[http]\napi_keys = 'one'\n", "api_keys must be an array of strings"),
        ("[sys]\ninterval = -1\n", "interval must be at least 0"),
        ("[flapping]\nwindow = 0\n", "window and ban_time above 0"),
        ("[http]\nprot = 1\n", "unknown key 'prot'"),
        ("[http]\nmax_connections = 1\n", "max_connections must be at least 2"),
        ("[http]\nheader_timeout = 0\n", "header_timeout above 0"),
        ("[http]\nidle_timeout = -1\n", "idle_timeout and header_timeout above 0"),
    ],
)
def test_config_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def client(client_id: str) -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=None,
        peer="127.0.0.1:1",
        protocol_version=5,
        clean_start=True,
        keepalive=60,
    )


def test_admission_keeps_bans_in_its_file(tmp_path: Path) -> None:
    path = tmp_path / "bans.json"
    admission = Admission(FlappingConfig(), path)
    admission.add(Ban(BanKind.CLIENT_ID, "gone", None, "test", time.time()))
    admission.add(Ban(BanKind.CLIENT_ID, "short", time.time() - 1, "expired", time.time()))
    assert [b["value"] for b in orjson.loads(path.read_bytes())] == ["gone"]
    again = Admission(FlappingConfig(), path)
    assert again.check(client("gone")) == "banned (clientid gone: test)"
    assert again.check(client("fine")) is None
    assert again.refused == 1
    assert again.remove(BanKind.CLIENT_ID, "gone")
    assert Admission(FlappingConfig(), path).check(client("gone")) is None


def test_admission_survives_a_corrupt_bans_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bans.json"
    path.write_text("{not json")
    assert Admission(FlappingConfig(), path).check(client("x")) is None
    assert "cannot read the bans" in caplog.text


def test_admission_bans_a_flapping_client(tmp_path: Path) -> None:
    admission = Admission(FlappingConfig(max_connects=2, window=60, ban_time=0.2), None)
    assert admission.check(client("f")) is None
    assert admission.check(client("f")) == "banned (clientid f: flapping)"
    time.sleep(0.25)
    assert admission.check(client("f")) is None


def test_new_keys_never_look_like_options() -> None:
    # One URL-safe key in 64 started with "-", and `ctl hash-key KEY` then failed; 2,000
    # keys would all miss that with a chance of 2e-14.
    keys = [new_key() for _ in range(2_000)]
    assert not [key for key in keys if key.startswith("-")]
    assert len(set(keys)) == len(keys)
    assert all(len(key) == 43 for key in keys)  # 32 random bytes, base64url
