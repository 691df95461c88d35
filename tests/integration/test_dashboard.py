"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright
while MQTT traffic flows. The numbers must appear, and a client kicked from the page must
disappear from it and lose its connection. A page of another origin that makes the browser
post a form to the API (CSRF) changes nothing; the dashboard's own requests still work.

In a cluster the page shows the cluster's figures and top topics, added up over the nodes
it names.

The screenshot of the run is written to tests/artifacts/dashboard.png (docs/dashboard.png is
a committed copy).
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqtt.packets import Publish
from tests.support.admin import API_KEY, Admin, http_config
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import start_broker
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.cluster import needs_nats_server, nodes_of
from tests.support.mosquitto import MOSQUITTO, start_mosquitto
from tests.support.nats_server import NatsServer
from tests.support.ports import free_port
from tests.support.workers import connect_on_worker

playwright_api = pytest.importorskip("playwright.sync_api")

logger = logging.getLogger(__name__)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
SCREENSHOT = ARTIFACTS / "dashboard.png"
# The browser binary itself: /usr/bin/chromium is Debian's shell wrapper around it.
CHROMIUM = next(
    (p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium")) if p and Path(p).exists()),
    None,
)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (make system-deps installs it)"
)


@contextlib.contextmanager
def dashboard(admin: Admin, **options: Any) -> Iterator[Any]:
    """A page of headless Chromium on `admin`'s dashboard, with the operator's Basic
    credentials (`options`: more for its browser context); the browser is closed after."""
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            context = browser.new_context(
                http_credentials={"username": "operator", "password": API_KEY}, **options
            )
            page = context.new_page()
            page.goto(admin.url + "/")
            yield page
        finally:
            browser.close()


class Traffic:
    """A publisher sending to a few topics every 10 ms until stopped, and a subscriber."""

    def __init__(self, admin: Admin) -> None:
        self.subscriber = connect_raw(admin.broker, "dash-subscriber")
        subscribe_raw(self.subscriber, 1, ("dash/#", 0))
        self.publisher = connect_raw(admin.broker, "dash-publisher")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        count = 0
        while not self._stop.wait(0.01):
            topic = "dash/hot" if count % 3 else f"dash/cold/{count % 2}"
            self.publisher.send(Publish(topic=topic, payload=b"%d" % count, qos=0))
            count += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.publisher.close()
        self.subscriber.close()


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    port = free_port()
    with running_broker(tmp_path, http_config(port) + "[sys]\ninterval = 1\n") as broker:
        yield Admin(broker, port)


def test_dashboard_shows_live_numbers_and_kicks_a_client(admin: Admin, workers: int) -> None:
    """In a pool the victim is on another worker than the dashboard's (worker 0)."""
    traffic = Traffic(admin)
    victim, _ = connect_on_worker(admin.broker, "dash-victim", workers - 1, workers)
    retainer = connect_raw(admin.broker, "dash-retainer")
    retainer.send(Publish(topic="dash/config", payload=b"v1", qos=0, retain=True))
    try:
        with dashboard(admin, viewport={"width": 1400, "height": 1000}) as page:
            expect = playwright_api.expect
            expect(page.locator("#status")).to_have_text(re.compile("^live"), timeout=10_000)
            expect(page.locator("#f-connections")).to_have_text("4")
            # The message counter climbs while traffic flows.
            first = int(page.locator("#f-received").inner_text())
            page.wait_for_function(
                f"Number(document.getElementById('f-received').textContent) > {first}",
                timeout=10_000,
            )
            expect(page.locator("#topics tbody tr").first).to_contain_text("dash/hot")
            expect(page.locator("#retained")).to_contain_text("dash/config")
            expect(page.locator("#config")).to_contain_text("tcp 127.0.0.1:")
            expect(page.locator("#bridges-panel")).to_be_hidden()  # none configured
            # Search narrows the clients table.
            page.fill("#client-search", "dash-v")
            expect(page.locator("#clients tbody tr")).to_have_count(1)
            page.fill("#client-search", "")
            expect(page.locator("#clients tbody tr")).to_have_count(4)
            time.sleep(3)  # a few seconds of chart
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            logger.info("dashboard screenshot: %s", SCREENSHOT)
            # Kick from the page: the row goes, and the client's connection ends.
            page.click("button.kick[data-clientid='dash-victim']")
            expect(page.locator("#clients")).not_to_contain_text("dash-victim", timeout=10_000)
            assert victim.is_closed_by_broker()
            expect(page.locator("#f-connections")).to_have_text("3", timeout=10_000)
    finally:
        traffic.stop()
        victim.close()
        retainer.close()
    assert SCREENSHOT.stat().st_size > 10_000


def test_static_files_need_credentials_and_stay_in_their_folder(admin: Admin) -> None:
    assert admin.request("GET", "/static/app.js", key=None).status == 401
    answer = admin.request("GET", "/static/app.js")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/javascript")
    assert admin.request("GET", "/static/..%2Fserver.py").status == 404
    assert admin.request("GET", "/static/missing.js").status == 404


# A form whose text/plain body is JSON: the name holds the object up to the reason's text,
# "=" and the value close it: {"kind": "peerhost", "value": "0.0.0.0/0", "reason": "x="}.
ATTACK_PAGE = """<!doctype html><html><body>
<form id="attack" method="POST" action="{action}" enctype="text/plain">
<input type="hidden" name='{{"kind":"peerhost","value":"0.0.0.0/0","duration":60,"reason":"x'
 value='"}}'></form>
<script>document.getElementById("attack").submit();</script></body></html>"""


# A decoy page framing the dashboard, so that a click on the decoy lands on a kick button.
FRAMING_PAGE = """<!doctype html><html><body><p>win a prize</p>
<iframe id="framed" src="{target}/" width="1200" height="800"></iframe></body></html>"""


class AttackSite:
    """A web server of another origin (127.0.0.1 on another port): ATTACK_PAGE at /,
    FRAMING_PAGE at /frame."""

    def __init__(self, target: str) -> None:
        pages = {
            "/": ATTACK_PAGE.format(action=target + "/api/v1/banned").encode(),
            "/frame": FRAMING_PAGE.format(target=target).encode(),
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = pages.get(self.path, b"")
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *_args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_page_of_another_origin_cannot_ban_through_the_browser(admin: Admin) -> None:
    """The operator has the dashboard open (the browser holds its Basic credentials) and
    visits another site, whose page posts a JSON-shaped text/plain form to the API: 403,
    no ban, CONNECTs still accepted. Another of its pages frames the dashboard: nothing
    loads in the frame. The dashboard's own JSON requests still pass."""
    site = AttackSite(admin.url)
    topic = unique("same-origin")
    subscriber = connect_raw(admin.broker, unique("csrf-sub"))
    subscribe_raw(subscriber, 1, (topic, 0))
    try:
        with dashboard(admin) as page:
            playwright_api.expect(page.locator("#status")).to_have_text(
                re.compile("^live"), timeout=10_000
            )
            attacked = page.context.new_page()
            attacked.goto(site.url)
            attacked.wait_for_url(admin.url + "/api/v1/banned", timeout=10_000)
            playwright_api.expect(attacked.locator("body")).to_contain_text(
                "cross-site request refused", timeout=10_000
            )
            # Framed by the other site, the dashboard does not load at all.
            framing = page.context.new_page()
            framing.goto(site.url + "frame")
            framing.wait_for_timeout(1000)
            framed = next(f for f in framing.frames if f.parent_frame is not None)
            assert framed.evaluate("document.getElementById('status')") is None, framed.url
            # The dashboard's own request, JSON from its origin, is served.
            status = page.evaluate(
                """async (topic) => (await fetch("/api/v1/publish", {
                    method: "POST",
                    headers: {"Content-Type": "application/json"},
                    body: JSON.stringify({topic, payload: "from the page"}),
                })).status""",
                topic,
            )
            assert status == 200
    finally:
        site.close()
    assert expect_publish(subscriber).payload == b"from the page"
    subscriber.close()
    wait_for_log(admin.broker, "refused POST /api/v1/banned from 127.0.0.1: a cross-site request")
    assert admin.get("/api/v1/banned")["data"] == []
    connect_raw(admin.broker, unique("still-welcome")).close()  # CONNACK 0, not 5


BRIDGE = """[[bridges]]
name = "cloud"
addresses = ["127.0.0.1:{port}"]
reconnect_delay = 0.2
max_reconnect_delay = 1.0
[[bridges.topics]]
pattern = "up/#"
direction = "out"
qos = 1
"""


@pytest.mark.skipif(not Path(MOSQUITTO).exists(), reason="mosquitto not installed")
def test_dashboard_lists_the_bridges(tmp_path: Path, workers: int) -> None:
    """A bridge to a real Mosquitto: its row says connected and counts what crossed; with
    the remote stopped, not connected, and the messages waiting for it."""
    remote = start_mosquitto(tmp_path)
    port = free_port()
    broker = start_broker(tmp_path, BRIDGE.format(port=remote.port) + http_config(port))
    admin = Admin(broker, port)
    publisher = None
    try:
        wait_for_log(broker, "bridge 'cloud': connected to", timeout=15)
        publisher = PahoCollector(broker, unique("dash-bridged"))
        for index in range(3):
            publisher.publish("up/x", b"%d" % index, 1)
        with dashboard(admin) as page:
            expect = playwright_api.expect
            cells = page.locator("#bridges tbody tr").first.locator("td")
            # name, connected, remote, worker, sent, received, queued, dropped, last error
            expect(cells.nth(0)).to_have_text("cloud", timeout=10_000)
            expect(cells.nth(1)).to_have_text("yes")
            expect(cells.nth(2)).to_have_text(f"127.0.0.1:{remote.port}")
            expect(cells.nth(4)).to_have_text("3", timeout=10_000)
            remote.stop()
            wait_for_log(broker, "bridge 'cloud': connection lost", timeout=10)
            for index in range(3, 5):
                publisher.publish("up/x", b"%d" % index, 1)
            expect(cells.nth(1)).to_have_text("no", timeout=10_000)
            expect(cells.nth(6)).to_have_text("2", timeout=10_000)
            expect(cells.nth(8)).not_to_be_empty()
    finally:
        if publisher is not None:
            publisher.close()
        assert broker.stop() == 0, broker.log()
        remote.stop()


@needs_nats_server
def test_in_a_cluster_the_dashboard_shows_the_whole_clusters_figures_and_top_topics(
    tmp_path: Path, nats: NatsServer
) -> None:
    """The page is node b's; the publisher and its topics are node a's only."""
    port = free_port()
    with nodes_of(tmp_path, nats, {"a": "", "b": http_config(port)}) as nodes:
        admin = Admin(nodes["b"], port)
        subscriber = connect_raw(nodes["b"], unique("dash-sub"))
        subscribe_raw(subscriber, 1, ("dash/#", 0))
        publisher = connect_raw(nodes["a"], unique("dash-pub"))
        stop = threading.Event()

        def publish() -> None:
            while not stop.wait(0.005):
                publisher.send(Publish(topic="dash/a-only", payload=b"x", qos=0))

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        try:
            with dashboard(admin) as page:
                expect = playwright_api.expect
                expect(page.locator("#node")).to_have_text("b · cluster: a, b", timeout=10_000)
                expect(page.locator("#f-connections")).to_have_text("2")  # one on each node
                # Node a's topic, sampled there (one batch in 16), ranked on node b's page.
                expect(page.locator("#topics tbody tr").first).to_contain_text(
                    "dash/a-only", timeout=10_000
                )
                first = int(page.locator("#f-received").inner_text())
                page.wait_for_function(
                    f"Number(document.getElementById('f-received').textContent) > {first}",
                    timeout=10_000,
                )
        finally:
            stop.set()
            thread.join(timeout=5)
            publisher.close()
            subscriber.close()
