"""`to_json_line`: an event record as one line of JSON, for the event sink (and test writers).

It needs orjson, a compiled extension, so it is kept out of `spark.event_schema`, which the Spark
job imports on the driver (the job travels in a zip, which cannot carry compiled extensions).
"""

from __future__ import annotations

import orjson


def to_json_line(record: dict[str, object]) -> bytes:
    """The record as one line of UTF-8 JSON ending in a newline."""
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
