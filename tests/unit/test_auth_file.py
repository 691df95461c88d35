"""plugins.auth_file: Mosquitto password files ($7$ and $6$), the CLI, reload, anonymous."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hooks.decisions import AUTH_BAD_CREDENTIALS, AUTH_NOT_AUTHORIZED, AuthResult, Decision
from hooks.events import AuthenticateRequest, ClientInfo
from hooks.hook_bus import HookBus
from plugins.auth_file import (
    PasswordFileError,
    Plugin,
    hash_password,
    parse_hash,
    parse_password_file,
)
from plugins.base import PluginConfigError, PluginContext

ROOT = Path(__file__).resolve().parents[2]
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")
needs_mosquitto_passwd = pytest.mark.skipif(
    MOSQUITTO_PASSWD is None,
    reason="mosquitto_passwd not installed (Debian package 'mosquitto'; `make system-deps`)",
)

# Written by Debian's mosquitto_passwd 2.0.11: `-b -c FILE alice secret` ($7$, its default),
# `-b FILE bob 'p:ss'`, and `-H sha512 -b FILE carol héllo` ($6$).
MOSQUITTO_FILE = """\
alice:$7$101$bpS/5Jyjjzw/lyXg$FkSWA1awIwW+jUny59v/2BZOO/QbrynMBHQgICq9/lONsFxWz3MIOQF2wk1ES2uocK5ANc0Yd+yQ0jsMqpDt+g==
bob:$7$101$ZV+RKAzzVfKF+b5k$oFXjNlCA74YFPmdLwpcDRhJFQeaaIkrYpLHT7ZMnyOxg0Y1aRy+pD02XVblryKDXTFzdojZozF1oiLdmoxdGGQ==
carol:$6$8vexhj1txriyi5Qu$BEKtYxoN3UczFKO6JOu9rWxu/i0yhFkf5LS7uaq5PWmzWVry3kbYnqQNiOlqU2WsXxVfVskSIGPZTCdBIPgPkg==
"""


def request(username: str | None, password: bytes | None) -> AuthenticateRequest:
    client = ClientInfo(
        client_id="c1",
        username=username,
        peer="127.0.0.1:1",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )
    return AuthenticateRequest(client=client, password=password)


def make_plugin(tmp_path: Path, text: str, **options: object) -> Plugin:
    (tmp_path / "passwd").write_text(text, encoding="utf-8")
    context = PluginContext(
        config_dir=tmp_path, node_name="n", worker_id=0, plugin_name="plugins.auth_file"
    )
    return Plugin({"password_file": "passwd", **options}, context)


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plugins.auth_file", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
        check=False,
    )


# -- files made by mosquitto_passwd ----------------------------------------------------


@pytest.mark.parametrize(
    ("username", "password"),
    [("alice", b"secret"), ("bob", b"p:ss"), ("carol", "héllo".encode())],
)
def test_recorded_mosquitto_passwd_hashes_verify(
    tmp_path: Path, username: str, password: bytes
) -> None:
    plugin = make_plugin(tmp_path, MOSQUITTO_FILE)
    assert plugin.authenticate(request(username, password)) is Decision.ALLOW
    assert plugin.authenticate(request(username, password + b"x")) == AUTH_BAD_CREDENTIALS


@needs_mosquitto_passwd
@pytest.mark.parametrize("algorithm", ["sha512-pbkdf2", "sha512"])
def test_files_from_the_installed_mosquitto_passwd(tmp_path: Path, algorithm: str) -> None:
    assert MOSQUITTO_PASSWD is not None
    path = tmp_path / "passwd"
    for user, password, create in (("ann", "first pw", ["-c"]), ("ben", "sec:ond", [])):
        subprocess.run(
            [MOSQUITTO_PASSWD, "-H", algorithm, *create, "-b", str(path), user, password],
            check=True,
            capture_output=True,
            timeout=30,
        )
    prefix = "$7$" if algorithm == "sha512-pbkdf2" else "$6$"
    assert all(line.split(":", 1)[1].startswith(prefix) for line in path.read_text().splitlines())
    plugin = make_plugin(tmp_path, path.read_text())
    assert plugin.authenticate(request("ann", b"first pw")) is Decision.ALLOW
    assert plugin.authenticate(request("ben", b"sec:ond")) is Decision.ALLOW
    assert plugin.authenticate(request("ben", b"first pw")) == AUTH_BAD_CREDENTIALS


def test_unknown_user_and_missing_password_are_bad_credentials(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, MOSQUITTO_FILE)
    assert plugin.authenticate(request("mallory", b"secret")) == AUTH_BAD_CREDENTIALS
    assert plugin.authenticate(request("alice", None)) == AUTH_BAD_CREDENTIALS
    assert plugin.authenticate(request("", b"")) == AUTH_BAD_CREDENTIALS


@pytest.mark.parametrize(
    ("option", "expected"),
    [(None, Decision.IGNORE), (True, Decision.ALLOW), (False, AUTH_NOT_AUTHORIZED)],
)
def test_client_without_user_name_follows_the_allow_anonymous_option(
    tmp_path: Path, option: bool | None, expected: Decision | AuthResult
) -> None:
    options = {} if option is None else {"allow_anonymous": option}
    plugin = make_plugin(tmp_path, MOSQUITTO_FILE, **options)
    assert plugin.authenticate(request(None, None)) == expected


def test_on_the_bus_unset_allow_anonymous_defers_to_the_broker(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, MOSQUITTO_FILE)
    for broker_allows, expected_allowed in ((True, True), (False, False)):
        bus = HookBus(allow_anonymous=broker_allows)
        plugin.register(bus)
        assert bus.authenticate(request(None, None)).allowed is expected_allowed
        assert bus.authenticate(request("alice", b"secret")).allowed
        assert bus.authenticate(request("alice", b"nope")) == AUTH_BAD_CREDENTIALS


# -- malformed files -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("no colon here", "line 3: expected 'user:hash'"),
        (":$6$abc$def", "line 3: expected 'user:hash'"),
        ("dan:plaintext", "line 3 \\(user 'dan'\\): hash must be"),
        ("dan:$5$c2FsdA==$aGFzaA==", "line 3 \\(user 'dan'\\): hash must be"),
        ("dan:$7$0$c2FsdA==$aGFzaA==", "iteration count '0' is not a positive integer"),
        ("dan:$7$x$c2FsdA==$aGFzaA==", "iteration count 'x'"),
        ("dan:$6$c2FsdA==$aGFzaA==", "hash is 4 bytes, not 64"),
        ("dan:$6$!!!$aGFzaA==", "not valid base64"),
        ("alice:" + MOSQUITTO_FILE.split(":", 1)[1].splitlines()[0], "already defined on line 1"),
    ],
)
def test_malformed_lines_are_reported_with_their_number(line: str, message: str) -> None:
    text = MOSQUITTO_FILE.splitlines()[0] + "\n# a comment\n" + line + "\n"
    with pytest.raises(PasswordFileError, match=message):
        parse_password_file(text, "passwd")


def test_blank_lines_comments_and_spaces_are_accepted() -> None:
    alice = MOSQUITTO_FILE.splitlines()[0]
    users = parse_password_file(f"\n# users\n  {alice.replace(':', ' : ', 1)}  \n\n", "f")
    assert list(users) == ["alice"]
    assert users["alice"].verify(b"secret")


def test_a_bad_file_at_start_up_is_a_plugin_config_error(tmp_path: Path) -> None:
    with pytest.raises(
        PluginConfigError,
        match=r"plugin plugins.auth_file: option 'password_file': .*passwd line 1",
    ):
        make_plugin(tmp_path, "garbage\n")
    context = PluginContext(config_dir=tmp_path, node_name="n", worker_id=0)
    with pytest.raises(PluginConfigError, match="cannot read password file"):
        Plugin({"password_file": "missing.txt"}, context)


def test_hash_round_trip_for_both_formats() -> None:
    made = hash_password(b"pw", iterations=7)
    assert parse_hash(made.encode()) == made
    assert made.encode().startswith("$7$7$")
    old = parse_hash(MOSQUITTO_FILE.splitlines()[2].split(":", 1)[1])
    assert old.iterations is None
    assert parse_hash(old.encode()) == old


# -- reload ----------------------------------------------------------------------------


def test_reload_picks_up_changes_and_keeps_the_old_table_on_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = make_plugin(tmp_path, MOSQUITTO_FILE)
    path = tmp_path / "passwd"
    path.write_text(f"zoe:{hash_password(b'new').encode()}\n", encoding="utf-8")
    plugin.reload()
    assert plugin.authenticate(request("zoe", b"new")) is Decision.ALLOW
    assert plugin.authenticate(request("alice", b"secret")) == AUTH_BAD_CREDENTIALS
    path.write_text("zoe:broken\n", encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="plugins.auth_file"):
        plugin.reload()
    assert plugin.authenticate(request("zoe", b"new")) is Decision.ALLOW
    [record] = caplog.records
    assert "previous users kept" in record.getMessage()
    assert "line 1" in record.getMessage()


# -- the CLI ---------------------------------------------------------------------------


def test_cli_creates_and_updates_a_file_the_plugin_reads(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    assert run_cli("add", str(path), "ann", "--password", "one").returncode == 0
    assert run_cli("add", str(path), "ben", "--password-stdin", stdin="two\n").returncode == 0
    result = run_cli("add", str(path), "ann", "--password", "three", "--iterations", "1000")
    assert result.returncode == 0, result.stderr
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [line.split(":")[0] for line in lines] == ["ann", "ben"]
    assert lines[0].split(":", 1)[1].startswith("$7$1000$")
    assert lines[1].split(":", 1)[1].startswith("$7$101$")
    assert os.stat(path).st_mode & 0o777 == 0o600
    plugin = make_plugin(tmp_path, path.read_text(encoding="utf-8"))
    assert plugin.authenticate(request("ann", b"three")) is Decision.ALLOW
    assert plugin.authenticate(request("ann", b"one")) == AUTH_BAD_CREDENTIALS
    assert plugin.authenticate(request("ben", b"two")) is Decision.ALLOW


@needs_mosquitto_passwd
def test_cli_edits_a_file_made_by_mosquitto_passwd(tmp_path: Path) -> None:
    assert MOSQUITTO_PASSWD is not None
    path = tmp_path / "passwd"
    subprocess.run(
        [MOSQUITTO_PASSWD, "-c", "-b", str(path), "ann", "pw-a"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    assert run_cli("add", str(path), "ben", "--password", "pw-b").returncode == 0
    plugin = make_plugin(tmp_path, path.read_text(encoding="utf-8"))
    assert plugin.authenticate(request("ann", b"pw-a")) is Decision.ALLOW
    assert plugin.authenticate(request("ben", b"pw-b")) is Decision.ALLOW


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "{file}", "a:b", "--password", "x"], "must be non-empty, without ':'"),
        (["add", "{file}", "ann", "--password", ""], "the password is empty"),
        (["add", "{file}", "ann", "--password", "x", "--iterations", "0"], "at least 1"),
    ],
)
def test_cli_rejects_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "passwd"
    result = run_cli(*(arg.format(file=path) for arg in args))
    assert result.returncode == 1
    assert message in result.stderr
    assert not path.exists()


def test_cli_refuses_to_edit_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("ann:not-a-hash\n", encoding="utf-8")
    result = run_cli("add", str(path), "ben", "--password", "x")
    assert result.returncode == 1
    assert "line 1" in result.stderr
    assert path.read_text(encoding="utf-8") == "ann:not-a-hash\n"
