"""The admin HTTP API against a running broker: authentication, paging, kicks (DISCONNECT 0x98
and the will), sessions, subscriptions, retained messages, publish, plugins and bans."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from mqtt.packets import ConnAck, Disconnect, Will
from mqtt.reason_codes import ReasonCode
from plugins.auth_file import hash_password
from pool.ownership import home_of
from tests.support.admin import API_KEY, Admin, basic, http_config
from tests.support.broker_config import running_broker, wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.listeners import Certificates
from tests.support.ports import free_port
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker, connections_of, refusals_of, worker_pid

OPERATOR, OPERATOR_PASSWORD = "operator", "s3cret-pass"


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[Admin]:
    directory = tmp_path_factory.mktemp("admin")
    password_file = directory / "admin.passwd"
    password_file.write_text(f"{OPERATOR}:{hash_password(OPERATOR_PASSWORD.encode()).encode()}\n")
    port = free_port()
    config = http_config(port, f'password_file = "{password_file.name}"')
    with running_broker(directory, config) as broker:
        yield Admin(broker, port)


def wait_until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def connected_ids(admin: Admin) -> set[str]:
    return {c["clientid"] for c in admin.get("/api/v1/clients?limit=10000")["data"]}


def test_the_http_listener_leaves_the_mqtt_process_one_thread(admin: Admin, workers: int) -> None:
    """pywsgi looked the host name up through gevent's thread pool, whose idle thread then
    cost MQTT connection storms about a tenth of their rate (docs/loadtest.md, "Where the cost
    of a connection goes")."""
    assert admin.get("/api/v1/health", key=None) == {"status": "ok"}
    pid = admin.broker.process.pid if workers == 1 else worker_pid(admin.broker, 0)
    assert len(list(Path(f"/proc/{pid}/task").iterdir())) == 1


# ----- authentication ----------------------------------------------------------------------


def test_health_and_ready_need_no_credentials(admin: Admin) -> None:
    assert admin.get("/api/v1/health", key=None) == {"status": "ok"}
    assert admin.get("/api/v1/ready", key=None) == {"ready": True}


@pytest.mark.parametrize(
    "path", ["/api/v1/clients", "/api/v1/stats", "/api/v1/banned", "/api/v1/retained", "/"]
)
def test_everything_else_is_refused_without_credentials(admin: Admin, path: str) -> None:
    answer = admin.request("GET", path, key=None)
    assert answer.status == 401
    assert answer.headers["WWW-Authenticate"].startswith("Basic")
    assert admin.request("GET", path, key="not-the-key").status == 401
    assert admin.request("GET", path, key=None, headers=basic(OPERATOR, "wrong")).status == 401


def test_api_key_and_password_file_user_are_accepted(admin: Admin) -> None:
    assert admin.request("GET", "/api/v1/stats").status == 200  # Bearer
    assert (
        admin.request("GET", "/api/v1/stats", key=None, headers={"X-API-Key": API_KEY}).status
        == 200
    )
    by_user = admin.request(
        "GET", "/api/v1/stats", key=None, headers=basic(OPERATOR, OPERATOR_PASSWORD)
    )
    assert by_user.status == 200
    # A browser's login prompt can carry an API key as the password.
    assert (
        admin.request("GET", "/api/v1/stats", key=None, headers=basic("any", API_KEY)).status == 200
    )
    wait_for_log(admin.broker, "admin HTTP: refused GET /api/v1/clients")


def test_unknown_route_and_wrong_method(admin: Admin) -> None:
    assert admin.request("GET", "/api/v1/nothing").status == 404
    assert admin.request("PUT", "/api/v1/clients").status == 405


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/nothing"),
        ("GET", "/admin/.env"),
        ("PUT", "/api/v1/clients"),
        ("POST", "/api/v1/health"),  # only GET of health and ready is open
        ("DELETE", "/api/v1/banned/clientid/x"),
    ],
)
def test_credentials_are_checked_before_routing(admin: Admin, method: str, path: str) -> None:
    """Whether a path exists is not told to a caller without credentials."""
    answer = admin.request(method, path, key=None)
    assert answer.status == 401, (method, path, answer.body)
    assert answer.headers["WWW-Authenticate"].startswith("Basic")


def test_a_request_of_over_100_headers_gets_431_and_one_log_line(admin: Admin) -> None:
    with socket.create_connection(("127.0.0.1", admin.port), timeout=5) as sock:
        headers = "".join(f"X-Filler-{n}: {n}\r\n" for n in range(120))
        sock.sendall(f"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert b"malformed HTTP request" in answer
    line = wait_for_log(admin.broker, "admin HTTP: refused a malformed request from 127.0.0.1")
    assert "more than 100 headers" in line and "(answered 431)" in line
    with socket.create_connection(("127.0.0.1", admin.port), timeout=5) as sock:
        sock.sendall(b"GET /api/v1/health HTTP/9.9\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
    wait_for_log(admin.broker, "Invalid http version")
    assert "Traceback" not in admin.broker.log()
    assert admin.get("/api/v1/health", key=None) == {"status": "ok"}


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


# ----- cross-site requests (the browser test is in test_dashboard.py) ---------------------


def test_state_changing_requests_need_a_json_body(admin: Admin, workers: int) -> None:
    """An HTML form can send text/plain, urlencoded or multipart bodies only: 415."""
    ban = {"kind": "clientid", "value": unique("csrf"), "duration": 60}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
        headers = {"Content-Type": content_type}
        answer = admin.request("POST", "/api/v1/banned", ban, headers=headers)
        assert answer.status == 415, (content_type, answer.body)
        assert "application/json" in answer.json()["error"]
    answer = admin.request("DELETE", "/api/v1/clients/nobody", headers={"Content-Type": ""})
    assert answer.status == 415
    assert ban["value"] not in str(admin.get("/api/v1/banned"))
    wait_for_log(admin.broker, "refused POST /api/v1/banned from 127.0.0.1: Content-Type is")


def test_cross_site_requests_get_403_and_same_origin_ones_pass(admin: Admin) -> None:
    topic = unique("csrf-pub")
    message = {"topic": topic, "payload": "x"}
    own = f"http://127.0.0.1:{admin.port}"
    for headers in (
        {"Origin": "http://127.0.0.1:9"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": own},
    ):
        answer = admin.request("POST", "/api/v1/publish", message, headers=headers)
        assert answer.status == 403, (headers, answer.body)
        assert "cross-site request refused" in answer.json()["error"]
    wait_for_log(admin.broker, "refused POST /api/v1/publish from 127.0.0.1: a cross-site request")
    for headers in ({"Origin": own, "Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}):
        answer = admin.request("POST", "/api/v1/publish", message, headers=headers)
        assert answer.status == 200, (headers, answer.body)
    # Reading is not state-changing: a GET carrying another Origin is answered.
    assert admin.get("/api/v1/health", headers={"Origin": "http://127.0.0.1:9"})


# ----- clients -------------------------------------------------------------------------------


def test_clients_are_listed_paged_and_filtered(admin: Admin, workers: int) -> None:
    """In a pool the clients are spread over every worker (the API is worker 0's): the
    table, its pages and one client's detail are pool-wide."""
    prefix = unique("page")
    clients = [
        connect_on_worker(admin.broker, f"{prefix}-{n}", n % workers, workers, keepalive=30 + n)[0]
        for n in range(5)
    ]
    try:
        first = admin.get(f"/api/v1/clients?clientid={prefix}&limit=2&page=1")
        assert first["meta"] == {"page": 1, "limit": 2, "count": 5, "hasnext": True}
        pages = [first] + [
            admin.get(f"/api/v1/clients?clientid={prefix}&limit=2&page={page}") for page in (2, 3)
        ]
        ids = [c["clientid"] for page in pages for c in page["data"]]
        assert ids == [f"{prefix}-{n}" for n in range(5)]
        assert pages[2]["meta"]["hasnext"] is False
        one = admin.get(f"/api/v1/clients/{prefix}-3")  # on the last worker of a pool
        assert one["keepalive"] == 33
        assert one["proto_ver"] == 4
        assert one["listener"].startswith("tcp 127.0.0.1:")
        assert admin.request("GET", "/api/v1/clients?limit=0").status == 400
        assert admin.request("GET", "/api/v1/clients/nobody-here").status == 404
    finally:
        for client in clients:
            client.close()


def test_kick_a_5_0_client_sends_disconnect_0x98_and_fires_its_will(
    admin: Admin, workers: int
) -> None:
    """In a pool the victim is on another worker than the API's: the kick is forwarded."""
    topic = unique("will-kick5")
    watcher = connect_raw(admin.broker, unique("watch"))
    subscribe_raw(watcher, 1, (topic, 1))
    victim_id = unique("kick5")
    will = Will(topic, b"gone", qos=1)
    victim, _ = connect_on_worker(
        admin.broker, victim_id, workers - 1, workers, version=5, will=will
    )
    assert admin.request("DELETE", f"/api/v1/clients/{victim_id}").status == 204
    disconnect = victim.expect()
    assert isinstance(disconnect, Disconnect)
    assert disconnect.reason_code == ReasonCode.ADMINISTRATIVE_ACTION
    assert victim.is_closed_by_broker()
    will = expect_publish(watcher)
    assert (will.topic, will.payload) == (topic, b"gone")
    wait_until(lambda: victim_id not in connected_ids(admin))
    wait_for_log(admin.broker, "administrative_action")
    watcher.close()


def test_kick_a_3_1_1_client_closes_it_and_fires_its_will(admin: Admin, workers: int) -> None:
    topic = unique("will-kick4")
    watcher = connect_raw(admin.broker, unique("watch"))
    subscribe_raw(watcher, 1, (topic, 0))
    victim_id = unique("kick4")
    victim, _ = connect_on_worker(
        admin.broker, victim_id, workers - 1, workers, will=Will(topic, b"bye")
    )
    assert admin.request("DELETE", f"/api/v1/clients/{victim_id}").status == 204
    assert victim.is_closed_by_broker()  # 3.1.1 has no server DISCONNECT: just closed
    assert expect_publish(watcher).payload == b"bye"
    wait_until(lambda: victim_id not in connected_ids(admin))
    assert admin.request("DELETE", f"/api/v1/clients/{victim_id}").status == 404
    watcher.close()


# ----- sessions and subscriptions ----------------------------------------------------------


def test_sessions_include_offline_ones_and_subscriptions_are_listed(
    admin: Admin, workers: int
) -> None:
    client_id = unique("offline")
    client, _ = connect_on_worker(admin.broker, client_id, workers - 1, workers, clean=False)
    subscribe_raw(client, 1, (f"{client_id}/a/+", 1), (f"{client_id}/b", 0))
    client.send(Disconnect())
    client.close()
    wait_until(lambda: client_id not in connected_ids(admin))
    node = admin.get("/api/v1/config")["node_name"]
    sessions = admin.get(f"/api/v1/sessions?clientid={client_id}")["data"]
    assert sessions == [
        {
            "clientid": client_id,
            "node": node,
            "connected": False,
            "persistent": True,
            "subscriptions": 2,
            "inflight": 0,
            "queue": 0,
            "awaiting_rel": 0,
        }
    ]
    rows = admin.get(f"/api/v1/subscriptions?clientid={client_id}")["data"]
    assert rows == [
        {"clientid": client_id, "node": node, "topic": f"{client_id}/a/+", "qos": 1},
        {"clientid": client_id, "node": node, "topic": f"{client_id}/b", "qos": 0},
    ]
    matching = admin.get(f"/api/v1/subscriptions?topic={client_id}/a/x")["data"]
    assert [row["topic"] for row in matching] == [f"{client_id}/a/+"]
    routes = {r["topic"]: r["subscribers"] for r in admin.get("/api/v1/routes?limit=10000")["data"]}
    assert routes[f"{client_id}/b"] == 1
    # A message for the offline session is queued: the session's queue says so.
    admin.request(
        "POST", "/api/v1/publish", {"topic": f"{client_id}/a/x", "payload": "q", "qos": 1}
    )
    wait_until(lambda: admin.get(f"/api/v1/sessions?clientid={client_id}")["data"][0]["queue"] == 1)
    assert admin.get("/api/v1/sessions?connected=false&limit=10000")["meta"]["count"] >= 1


# ----- retained messages and publish --------------------------------------------------------


def test_retained_list_get_and_delete_clears_the_topic(admin: Admin) -> None:
    topic = f"{unique('ret')}/x"
    publisher = connect_raw(admin.broker, unique("pub"))
    from mqtt.packets import Publish  # noqa: PLC0415

    publisher.send(Publish(topic=topic, payload=b"\xff\x00", qos=0, retain=True))
    wait_until(lambda: admin.request("GET", f"/api/v1/retained/{topic}").status == 200)
    got = admin.get(f"/api/v1/retained/{topic}")
    assert (got["payload"], got["payload_encoding"], got["qos"]) == ("/wA=", "base64", 0)
    listed = admin.get(f"/api/v1/retained?topic={topic.split('/', maxsplit=1)[0]}/#")["data"]
    assert [m["topic"] for m in listed] == [topic]
    assert admin.request("DELETE", f"/api/v1/retained/{topic}").status == 204
    wait_until(lambda: admin.request("GET", f"/api/v1/retained/{topic}").status == 404)
    subscriber = connect_raw(admin.broker, unique("late"))
    subscribe_raw(subscriber, 1, (topic, 0))
    subscriber.expect_nothing(0.3)  # the topic holds no retained message any more
    assert admin.request("DELETE", f"/api/v1/retained/{topic}").status == 404
    publisher.close()
    subscriber.close()


def test_publish_reaches_subscribers_and_bad_input_gets_400(admin: Admin) -> None:
    topic = unique("api-pub")
    subscriber = connect_raw(admin.broker, unique("sub"))
    subscribe_raw(subscriber, 1, (topic, 1))
    answer = admin.request(
        "POST",
        "/api/v1/publish",
        {"topic": topic, "payload": "aGk=", "encoding": "base64", "qos": 1},
    )
    assert answer.status == 200
    message = expect_publish(subscriber)
    assert (message.topic, message.payload, message.qos) == (topic, b"hi", 1)
    for bad in (
        {"topic": "a/+", "payload": "x"},
        {"topic": "$SYS/x", "payload": "x"},
        {"topic": topic, "qos": 3},
        {"payload": "x"},
        {"topic": topic, "payload": "!!", "encoding": "base64"},
    ):
        assert admin.request("POST", "/api/v1/publish", bad).status == 400, bad
    answer = admin.request("POST", "/api/v1/publish", None, headers={"Content-Length": "0"})
    assert answer.status == 400
    subscriber.close()


def test_publish_obeys_max_topic_levels_as_an_mqtt_publish_does(admin: Admin) -> None:
    """[limits] max_topic_levels is 128 by default: a topic of 129 levels is refused."""
    deep = "/".join(["l"] * 129)
    answer = admin.request("POST", "/api/v1/publish", {"topic": deep, "payload": "x"})
    assert answer.status == 400
    assert "max_topic_levels (128)" in answer.json()["error"]
    fits = "/".join(["l"] * 128)
    assert admin.request("POST", "/api/v1/publish", {"topic": fits, "payload": "x"}).status == 200


def test_plugins_list_and_reload(admin: Admin, workers: int) -> None:
    assert admin.get("/api/v1/plugins") == []
    assert admin.request("POST", "/api/v1/plugins/reload").json() == []
    # Done on every worker of a pool (the API forwards the reload).
    lines = wait_for_log_lines(admin.broker, "re-authorised the subscriptions", workers)
    if workers > 1:
        assert {line.split("[worker ")[1][0] for line in lines} == {"0", "1"}


def test_config_summary_has_no_secrets(admin: Admin) -> None:
    config = admin.get("/api/v1/config")
    assert config["http"]["port"] == admin.port
    assert "api_keys" not in str(config)
    assert config["listeners"][0].startswith("tcp 127.0.0.1:")


# ----- bans ------------------------------------------------------------------------------


def refused_with(broker: BrokerProcess, client_id: str, version: int, **kwargs: object) -> int:
    client = RawClient(broker.host, broker.port, version=version)
    connack = client.connect(client_id, **kwargs)
    assert isinstance(connack, ConnAck)
    if connack.reason_code:
        assert client.is_closed_by_broker()  # a refused CONNECT is closed [MQTT-3.2.2-5]
    client.close()
    return connack.reason_code


def refused_on_every_worker(broker: BrokerProcess, client_id: str, workers: int) -> None:
    """CONNECTs of `client_id` are refused as banned until every worker of the pool has
    refused one (the ban was added through worker 0's API: it holds on all of them)."""
    for _attempt in range(40):
        assert refused_with(broker, client_id, 5) == ReasonCode.BANNED
        if workers == 1 or set(refusals_of(broker, client_id)) == set(range(workers)):
            return
    raise AssertionError(f"40 refused CONNECTs of {client_id!r} missed a worker")


def test_a_ban_refuses_the_next_connect_until_it_is_removed(admin: Admin, workers: int) -> None:
    client_id = unique("banned")
    body = {"kind": "clientid", "value": client_id, "reason": "test", "duration": 60}
    answer = admin.request("POST", "/api/v1/banned", body)
    assert answer.status == 201
    assert answer.json()["until"] > time.time() + 50
    refused_on_every_worker(admin.broker, client_id, workers)
    assert refused_with(admin.broker, client_id, 4) == 0x05  # 3.1.1: not authorised
    wait_for_log(admin.broker, f"refused CONNECT from client {client_id!r}")
    bans = admin.get("/api/v1/banned?limit=10000")["data"]
    assert any(ban["value"] == client_id for ban in bans)
    assert admin.request("DELETE", f"/api/v1/banned/clientid/{client_id}").status == 204
    # Lifted on every worker: CONNECTs pass until each worker has accepted one.
    for _attempt in range(40):
        assert refused_with(admin.broker, client_id, 5) == 0
        if workers == 1 or set(connections_of(admin.broker, client_id)) == set(range(workers)):
            break
    else:
        raise AssertionError(f"40 CONNECTs of {client_id!r} missed a worker")
    assert admin.request("DELETE", f"/api/v1/banned/clientid/{client_id}").status == 404


def test_bans_by_username_and_by_cidr(admin: Admin) -> None:
    user = unique("user")
    admin.request("POST", "/api/v1/banned", {"kind": "username", "value": user})
    assert refused_with(admin.broker, unique("u"), 5, username=user) == ReasonCode.BANNED
    assert refused_with(admin.broker, unique("u"), 5, username="someone-else") == 0
    admin.request("DELETE", f"/api/v1/banned/username/{user}")
    admin.request("POST", "/api/v1/banned", {"kind": "peerhost", "value": "127.0.0.0/8"})
    try:
        assert refused_with(admin.broker, unique("ip"), 5) == ReasonCode.BANNED
    finally:
        assert admin.request("DELETE", "/api/v1/banned/peerhost/127.0.0.0/8").status == 204
    assert refused_with(admin.broker, unique("ip"), 5) == 0


def test_malformed_bans_get_400(admin: Admin) -> None:
    for bad in (
        {"kind": "planet", "value": "x"},
        {"kind": "peerhost", "value": "not-an-ip"},
        {"kind": "clientid", "value": ""},
        {"kind": "clientid", "value": "x", "duration": -1},
    ):
        assert admin.request("POST", "/api/v1/banned", bad).status == 400, bad


def test_bans_survive_a_restart(tmp_path: Path) -> None:
    port = free_port()
    with running_broker(tmp_path, http_config(port)) as broker:
        Admin(broker, port).request("POST", "/api/v1/banned", {"kind": "clientid", "value": "kept"})
    with running_broker(tmp_path, http_config(port)) as broker:
        assert [b["value"] for b in Admin(broker, port).get("/api/v1/banned")["data"]] == ["kept"]
        assert refused_with(broker, "kept", 5) == ReasonCode.BANNED


def flap(broker: BrokerProcess, client_id: str, workers: int) -> bool:
    """Four CONNECTs of `client_id` with `[flapping] max_connects = 4`: the first three are
    accepted, the 4th is refused as banned, the ban is logged. Whether they landed on every
    worker, the 4th on another one than the id's home, which counts them (one process:
    True)."""
    for _ in range(3):
        assert refused_with(broker, client_id, 5) == 0
    assert refused_with(broker, client_id, 5) == ReasonCode.BANNED  # the 4th in 10 s
    wait_for_log(broker, f"client {client_id!r} flapping: 4 CONNECTs within 10 s")
    if workers == 1:
        return True
    deadline = time.monotonic() + 5
    while len(connections_of(broker, client_id)) < 3 or not refusals_of(broker, client_id):
        assert time.monotonic() < deadline, f"the CONNECTs of {client_id!r} were not all logged"
        time.sleep(0.02)
    landed = set(connections_of(broker, client_id) + refusals_of(broker, client_id))
    return landed == set(range(workers)) and refusals_of(broker, client_id) != [
        home_of(client_id, workers)
    ]


def test_flapping_bans_the_client_id_and_the_ban_expires(tmp_path: Path, workers: int) -> None:
    """In a pool a client id's CONNECTs count wherever they land (at the id's home worker):
    the kernel picks the worker of each connection, so fresh client ids flap until one's
    four CONNECTs landed on every worker and the refused one away from the id's home."""
    port = free_port()
    config = http_config(port) + "[flapping]\nmax_connects = 4\nwindow = 10\nban_time = 1.5\n"
    with running_broker(tmp_path, config) as broker:
        for attempt in range(12):
            client_id = f"flappy-{attempt}"
            if flap(broker, client_id, workers):
                break
            time.sleep(1.6)  # its ban expires before the next client id flaps
        else:
            raise AssertionError("12 client ids flapped without their CONNECTs spreading")
        bans = Admin(broker, port).get("/api/v1/banned")["data"]
        assert [(b["value"], b["reason"]) for b in bans] == [(client_id, "flapping")]
        assert refused_with(broker, "other", 5) == 0  # only that client id
        time.sleep(1.6)
        assert refused_with(broker, client_id, 5) == 0  # the ban expired
        assert Admin(broker, port).get("/api/v1/banned")["data"] == []


def test_http_port_in_use_stops_the_broker_with_a_clear_error(
    admin: Admin, broker_factory: object
) -> None:
    with pytest.raises(RuntimeError, match="cannot listen for the admin HTTP API"):
        broker_factory(http_config(admin.port))  # type: ignore[operator]


def test_https_with_a_certificate(tmp_path: Path) -> None:
    certificates = Certificates(tmp_path)
    port = free_port()
    config = http_config(port, f'certfile = "{certificates.server_file.name}"')
    with running_broker(tmp_path, config) as broker:
        wait_for_log(broker, f"admin HTTP: listening on https://127.0.0.1:{port}")
        context = ssl.create_default_context(cafile=str(certificates.ca_file))
        # Connections that never start their TLS handshake, beyond the cap (64): closed for
        # newcomers like any connection waiting for a request.
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(80)]
        try:
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
            started = time.monotonic()
            connection.request("GET", "/api/v1/stats", headers={"X-API-Key": API_KEY})
            response = connection.getresponse()
            assert response.status == 200
            assert time.monotonic() - started < 2
            assert orjson.loads(response.read())["connections"] == 0
            connection.close()
        finally:
            for sock in silent:
                sock.close()


def test_oversized_and_malformed_bodies(admin: Admin) -> None:
    # http.client sends the whole body before it reads: a body larger than the socket
    # buffers (8 MB) reaches the 413 only if the listener drops the rest of it after its
    # answer instead of closing on unread bytes (which resets the connection).
    for size in (1_100_000, 8_000_000):
        big = {"topic": "a", "payload": "x" * size}
        assert admin.request("POST", "/api/v1/publish", big).status == 413
    connection = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=10)
    json_headers = {"X-API-Key": API_KEY, "Content-Type": "application/json"}
    connection.request("POST", "/api/v1/publish", body=b"{not json", headers=json_headers)
    answer = connection.getresponse()
    assert answer.status == 400
    assert b"not JSON" in answer.read()
    connection.close()
    assert admin.get("/api/v1/health", key=None) == {"status": "ok"}  # still serving
