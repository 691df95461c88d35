"""What the auth_postgres and auth_redis tests share: the users they store, and the checks
made against a broker that reads them.

Each user's password is `pw-<name>`. `sha-user` is hashed with the plugins' default
(salted SHA-256, salt first), `pbkdf2-user` and `bcrypt-user` name their own algorithm in
the row (the plugin is configured with `pbkdf2_iterations = PBKDF2_ITERATIONS`), `root` is
a superuser, and `broken` holds a hash no password can match.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import bcrypt

from mqtt.packets import ConnAck, Publish
from mqtt.reason_codes import ConnackReturnCode, ReasonCode
from plugins.password_hash import HashSpec, hash_password
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient
from tests.support.workers import ATTEMPTS, connections_of, refusals_of

PBKDF2_ITERATIONS = 1000
SERVER_UNAVAILABLE = {4: ConnackReturnCode.SERVER_UNAVAILABLE, 5: ReasonCode.SERVER_UNAVAILABLE}
NOT_AUTHORIZED = {4: ConnackReturnCode.NOT_AUTHORIZED, 5: ReasonCode.NOT_AUTHORIZED}
BAD_CREDENTIALS = {
    4: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
}


@dataclass(frozen=True)
class StoredUser:
    name: str
    password_hash: str
    salt: str
    superuser: bool
    algorithm: str | None  # None: the plugin's default (sha256)


def stored_users() -> list[StoredUser]:
    bcrypt_salt = bcrypt.gensalt(4).decode()
    pbkdf2 = HashSpec("pbkdf2", pbkdf2_iterations=PBKDF2_ITERATIONS)
    return [
        StoredUser("sha-user", hash_password(HashSpec(), b"pw-sha-user", "s1"), "s1", False, None),
        StoredUser(
            "pbkdf2-user", hash_password(pbkdf2, b"pw-pbkdf2-user", "s2"), "s2", False, "pbkdf2"
        ),
        StoredUser(
            "bcrypt-user",
            hash_password(HashSpec("bcrypt"), b"pw-bcrypt-user", bcrypt_salt),
            bcrypt_salt,
            False,
            "bcrypt",
        ),
        StoredUser("root", hash_password(HashSpec(), b"pw-root", "s3"), "s3", True, None),
        StoredUser("broken", "not-a-hash", "s4", False, None),
    ]


def connack(
    broker: BrokerProcess,
    version: int,
    username: str | None,
    password: str,
    client_id: str | None = None,
) -> int:
    """The CONNACK code a new client with these credentials gets (None: no user name, and
    so no password); `client_id` by default a new one."""
    client = RawClient(broker.host, broker.port, version=version, timeout=10)
    try:
        credentials = (
            {} if username is None else {"username": username, "password": password.encode()}
        )
        answer = client.connect(client_id or unique("db"), **credentials)
        assert isinstance(answer, ConnAck), answer
        return int(answer.reason_code)
    finally:
        client.close()


def worker_of(broker: BrokerProcess, workers: int, client_id: str, refused: bool) -> int:
    """The worker that logged the CONNECT of `client_id` (accepted, or refused); one
    process (which logs no worker) is worker 0."""
    if workers == 1:
        return 0
    seen = refusals_of if refused else connections_of
    deadline = time.monotonic() + 5
    while not (workers := seen(broker, client_id)):
        assert time.monotonic() < deadline, f"no worker logged the CONNECT of {client_id!r}"
        time.sleep(0.01)
    return workers[-1]


def await_backend_on_every_worker(
    broker: BrokerProcess, workers: int, user: str, seconds: float
) -> None:
    """CONNECT as `user` (password `pw-<user>`) until every worker of the pool has let one
    through: each worker asks the backend with its own connections, and each reconnects
    on its own once the backend is back. AssertionError past `seconds`."""
    deadline = time.monotonic() + seconds
    answered: set[int] = set()
    while len(answered) < workers:
        assert time.monotonic() < deadline, (
            f"CONNECTs still refused {seconds:.0f} s after the restart on the workers "
            f"other than {sorted(answered)}"
        )
        client_id = unique("back")
        if connack(broker, 4, user, f"pw-{user}", client_id) == 0:
            answered.add(worker_of(broker, workers, client_id, refused=False))
        else:
            time.sleep(0.2)


def wrong_password_codes(broker: BrokerProcess, workers: int, version: int, user: str) -> set[int]:
    """The CONNACK codes a wrong password for `user` gets, CONNECTing until every worker
    has answered one."""
    codes: set[int] = set()
    answered: set[int] = set()
    for _ in range(ATTEMPTS):
        client_id = unique("wrong")
        codes.add(connack(broker, version, user, "wrong", client_id))
        answered.add(worker_of(broker, workers, client_id, refused=True))
        if len(answered) == workers:
            return codes
    raise AssertionError(f"{ATTEMPTS} CONNECTs reached only the workers {sorted(answered)}")


def login(broker: BrokerProcess, user: str, client_id: str | None = None) -> RawClient:
    return connect_raw(
        broker, client_id or unique(user), username=user, password=f"pw-{user}".encode()
    )


class Traffic:
    """A client publishing to itself (QoS 0) every 20 ms in a thread, timing each round
    trip: it shows whether the worker keeps serving while another client waits."""

    def __init__(self, broker: BrokerProcess, user: str) -> None:
        self.client = login(broker, user)
        self.topic = f"users/{user}/{unique('live')}"
        assert list(subscribe_raw(self.client, 1, (self.topic, 0)).reason_codes) == [0]
        self.round_trip()  # the ACL answer for the topic is now cached
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def round_trip(self) -> float:
        sent = time.perf_counter()
        self.client.send(Publish(self.topic, b"ping", qos=0))
        assert expect_publish(self.client).payload == b"ping"
        return time.perf_counter() - sent

    def _run(self) -> None:
        while not self._stop.is_set():
            self.latencies.append(self.round_trip())
            time.sleep(0.02)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(10)
        self.client.close()
        return self.latencies
