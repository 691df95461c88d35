"""The admin listener's refusal of cross-site and non-JSON state-changing requests."""

import pytest

from admin.request_guard import cross_site_reason, json_body_reason


@pytest.mark.parametrize(
    ("origin", "fetch_site", "host", "scheme"),
    [
        (None, None, "127.0.0.1:18083", "http"),  # curl, ctl: no browser headers
        ("http://127.0.0.1:18083", "same-origin", "127.0.0.1:18083", "http"),
        ("http://127.0.0.1:18083", None, "127.0.0.1:18083", "http"),
        (None, "none", "127.0.0.1:18083", "http"),  # typed into the address bar
        ("HTTP://Broker.Example:18083", "Same-Origin", "broker.example:18083", "http"),
        ("https://broker.example", None, "broker.example:443", "https"),
        ("http://broker.example:80", None, "broker.example", "http"),
    ],
)
def test_same_origin_and_non_browser_requests_pass(
    origin: str | None, fetch_site: str | None, host: str, scheme: str
) -> None:
    assert cross_site_reason(origin, fetch_site, host, scheme) is None


@pytest.mark.parametrize(
    ("origin", "fetch_site", "host", "scheme", "said"),
    [
        ("http://127.0.0.1:8000", None, "127.0.0.1:18083", "http", "Origin"),
        ("http://127.0.0.1:8000", "same-site", "127.0.0.1:18083", "http", "same-site"),
        (None, "cross-site", "127.0.0.1:18083", "http", "cross-site"),
        ("null", None, "127.0.0.1:18083", "http", "Origin 'null'"),
        ("https://127.0.0.1:18083", None, "127.0.0.1:18083", "http", "Origin"),
        ("http://127.0.0.1:18083", None, None, "http", "no Host"),
        ("http://127.0.0.1:18083", "cross-site", "127.0.0.1:18083", "http", "cross-site"),
    ],
)
def test_cross_site_requests_are_named(
    origin: str | None, fetch_site: str | None, host: str | None, scheme: str, said: str
) -> None:
    reason = cross_site_reason(origin, fetch_site, host, scheme)
    assert reason is not None and said in reason


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=utf-8"])
def test_json_bodies_pass(content_type: str) -> None:
    assert json_body_reason(content_type) is None


@pytest.mark.parametrize(
    "content_type",
    [None, "", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"],
)
def test_form_bodies_are_refused(content_type: str | None) -> None:
    reason = json_body_reason(content_type)
    assert reason is not None and "application/json" in reason
