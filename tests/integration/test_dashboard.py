"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright
while MQTT traffic flows. The numbers must appear, and a client kicked from the page must
disappear from it and lose its connection.

The screenshot of the run is written to tests/artifacts/dashboard.png (docs/dashboard.png is
a committed copy).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqtt.packets import Publish
from tests.support.admin import API_KEY, Admin, free_port, http_config
from tests.support.broker_config import running_broker
from tests.support.clients import connect_raw, subscribe_raw
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
        with playwright_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            context = browser.new_context(
                http_credentials={"username": "operator", "password": API_KEY},
                viewport={"width": 1400, "height": 1000},
            )
            page = context.new_page()
            page.goto(admin.url + "/")
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
            browser.close()
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
