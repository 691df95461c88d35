"""A private PostgreSQL cluster for a test module: `initdb` in a temporary directory, loopback only.

Debian's `postgresql` package (Makefile `system-deps`) puts its programs in
/usr/lib/postgresql/<version>/bin; the newest is used. PostgreSQL refuses to run as root, so
when the tests run as root the cluster belongs to an unprivileged system user
(`mqtt-test-pg`, made with `useradd` if missing) and its programs run as that user.
The server listens on 127.0.0.1 at a free port with its unix socket in the cluster's
directory, trusts local connections (user `postgres`, database `postgres`) and skips fsync:
it is thrown away with the directory. `stop()` is a fast shutdown (clients are
disconnected, as when a database server goes away); `start()` brings it back on the same
port with the same data.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support.ports import free_port

SYSTEM_USER = "mqtt-test-pg"


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's bin directory."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run "
            "`make system-deps` (Debian package postgresql)"
        )
    return Path(found[-1]).parent


def _version(path: str) -> int:
    return int(Path(path).parts[-3].split(".")[0])


def _owner() -> dict[str, Any]:
    """Popen's arguments that run a program as the cluster's owner: an unprivileged user
    when the tests run as root (made if missing), else the user running them. The child
    itself changes user (rather than `runuser`, which does not pass on signals), so the
    process the test holds is the server and `stop()` signals it."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SYSTEM_USER,
            ],
            check=True,
        )
    return {"user": SYSTEM_USER, "group": pwd.getpwnam(SYSTEM_USER).pw_gid, "extra_groups": []}


class PostgresServer:
    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.directory = Path(tempfile.mkdtemp(prefix="mqtt-test-pg-"))
        self.data = self.directory / "data"
        self.log_path = self.directory / "postgres.log"
        self.port = free_port()
        self.conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        self._owner = _owner()
        if self._owner:
            shutil.chown(self.directory, SYSTEM_USER)
        try:
            subprocess.run(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ],
                check=True,
                capture_output=True,
                cwd=self.directory,
                **self._owner,
            )
        except (OSError, subprocess.CalledProcessError) as error:
            shutil.rmtree(self.directory, ignore_errors=True)
            output = getattr(error, "stderr", b"") or b""
            raise RuntimeError(
                f"initdb failed: {error}\n{output.decode(errors='replace')}"
            ) from None
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.directory),
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "synchronous_commit=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                **self._owner,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.conninfo, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start:\n{self.log()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown: open connections are closed, as when the server goes away."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(2)  # SIGINT: PostgreSQL's fast shutdown
            process.wait(timeout=30)

    def execute(self, sql: str, *params: Any) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            connection.execute(sql, params or None)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
