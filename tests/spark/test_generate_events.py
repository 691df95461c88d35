"""loadtest.generate_events: sink-like files whose summary matches what the lines hold."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from loadtest.generate_events import SUMMARY_FILE, generate
from spark.event_schema import FIELD_NAMES


def test_files_hold_exactly_the_events_the_summary_counts(tmp_path: Path) -> None:
    totals = generate(
        tmp_path,
        events=3_000,
        topics=20,
        clients=50,
        start=1_700_000_040.0,
        duration=600.0,
        file_bytes=200_000,
    )
    files = sorted(tmp_path.glob("events-*.json"))
    lines = [json.loads(line) for path in files for line in path.read_bytes().splitlines()]
    kinds = Counter(line["event"] for line in lines)

    assert len(files) == totals.files > 1  # rotated by size, like the sink
    assert all(tuple(line) == FIELD_NAMES for line in lines)  # every field, schema order
    assert [line["ts"] for line in lines] == sorted(line["ts"] for line in lines)
    assert (len(lines), kinds["message.publish"], kinds["message.delivered"]) == (
        totals.events,
        totals.published,
        totals.delivered,
    )
    assert (kinds["client.connected"], kinds["client.disconnected"]) == (
        totals.connects,
        totals.disconnects,
    )
    assert len({line["topic"] for line in lines if line["topic"]}) <= 20
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())["events"] == 3_000
    assert not list(tmp_path.glob("_events-*"))  # nothing left aside
