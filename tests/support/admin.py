"""The admin HTTP listener in tests: a broker config with `[http]` on a free port, requests
to it with the test's API key, and `python -m admin.ctl` run against it."""

from __future__ import annotations

import base64
import http.client
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from admin.auth import hash_key
from tests.support.broker_process import ROOT, BrokerProcess

API_KEY = "test-key-0123456789"


def http_config(port: int, extra: str = "") -> str:
    """A `[http]` table with API_KEY; `extra` adds keys to it."""
    return f'[http]\nport = {port}\napi_keys = ["{hash_key(API_KEY)}"]\n{extra}\n'


@dataclass
class Answer:
    status: int
    body: bytes
    headers: Any

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Admin:
    """Requests to one broker's admin listener; `auth` None: no credentials."""

    broker: BrokerProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = API_KEY,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        all_headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        if method != "GET":
            all_headers["Content-Type"] = "application/json"  # as ctl and the dashboard
        all_headers.update(headers or {})
        data = orjson.dumps(body) if body is not None else None
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, path, body=data, headers=all_headers)
            response = connection.getresponse()
            return Answer(response.status, response.read(), response.headers)
        finally:
            connection.close()

    def get(self, path: str, **kwargs: Any) -> Any:
        """GET `path`, which must succeed; its JSON."""
        answer = self.request("GET", path, **kwargs)
        assert answer.status == 200, (path, answer.status, answer.body)
        return answer.json()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def ctl(admin: Admin, *args: str, key: str = API_KEY) -> subprocess.CompletedProcess[str]:
    """`python -m admin.ctl *args` against `admin`'s broker with `key`; not checked (the
    caller asserts on its exit code and output)."""
    env = {**os.environ, "ACTOR_MQTT_URL": admin.url, "ACTOR_MQTT_API_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "admin.ctl", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
