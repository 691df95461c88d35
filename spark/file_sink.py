"""Rotating event files that a Spark file source can watch safely.

Lines are appended to a file in a staging folder inside the event directory
(`DIR/_staging/<node>-<worker>/`: Spark's file source ignores names starting with `_`, and the
same filesystem makes the rename atomic). At rotation the file is flushed, fsynced and renamed
into `DIR`, so a reader never sees a half-written file. Names sort by creation time and are
unique per node and worker: `events-<utc>-<node>-<worker>-<seq>.json`.

After a crash, `recover_staging()` moves the leftover staging files in, cut after their last
complete line. The class does plain blocking I/O and raises `OSError`; the event-sink plugin
runs it in its writer greenlet and decides what to do on errors.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final

logger = logging.getLogger(__name__)

STAGING_DIR: Final = "_staging"
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.]+")


def _utc_stamp(epoch_seconds: float) -> str:
    micros = int(epoch_seconds * 1_000_000)
    seconds, fraction = divmod(micros, 1_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"{fraction:06d}Z"


def _complete_length(path: Path) -> int:
    """Length of the file up to and including its last newline."""
    with path.open("rb") as stream:
        stream.seek(0, os.SEEK_END)
        end = stream.tell()
        position = end
        while position > 0:
            step = min(65536, position)
            position -= step
            stream.seek(position)
            chunk = stream.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return position + newline + 1
    return 0


def _fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class RotatingFileSink:
    """Appends byte batches (whole lines) to a staging file and publishes it at rotation."""

    def __init__(
        self,
        directory: Path,
        *,
        node: str,
        worker: int,
        rotate_seconds: float,
        rotate_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self._tag = f"{_UNSAFE_NAME_CHARS.sub('_', node)}-{worker}"
        self.staging = directory / STAGING_DIR / self._tag
        self._rotate_seconds = rotate_seconds
        self._rotate_bytes = rotate_bytes
        self._clock = clock
        self._sequence = 0
        self._stream: BinaryIO | None = None
        self._path: Path | None = None
        self._opened_at = 0.0
        self._size = 0
        self.files_published = 0

    def recover_staging(self) -> int:
        """Publish files left in staging by a crash (partial last line cut); returns how many."""
        self.staging.mkdir(parents=True, exist_ok=True)
        recovered = 0
        for leftover in sorted(self.staging.iterdir()):
            if leftover == self._path or not leftover.is_file():
                continue
            keep = _complete_length(leftover)
            if keep == 0:
                leftover.unlink()
                continue
            with leftover.open("r+b") as stream:
                stream.truncate(keep)
                os.fsync(stream.fileno())
            os.replace(leftover, self.directory / leftover.name)
            recovered += 1
        if recovered:
            _fsync_dir(self.directory)
            logger.info(
                "event sink recovered %d staging file(s) into %s", recovered, self.directory
            )
        return recovered

    def write(self, lines: bytes) -> None:
        """Append complete lines (one write); opens a new staging file when none is open."""
        if self._stream is None:
            self._open()
        assert self._stream is not None
        self._stream.write(lines)
        self._stream.flush()
        self._size += len(lines)

    def seconds_until_rotation(self) -> float | None:
        """Time left before the open file is due to rotate; None when no file is open."""
        if self._stream is None:
            return None
        return max(0.0, self._opened_at + self._rotate_seconds - self._clock())

    def rotation_due(self) -> bool:
        if self._stream is None:
            return False
        age = self._clock() - self._opened_at
        return self._size >= self._rotate_bytes or age >= self._rotate_seconds

    def rotate(self) -> Path | None:
        """Flush, fsync and rename the open file into the directory; returns its final path."""
        stream, path = self._stream, self._path
        if stream is None or path is None:
            return None
        self._stream = None
        self._path = None
        try:
            stream.flush()
            os.fsync(stream.fileno())
        finally:
            stream.close()
        final = self.directory / path.name
        os.replace(path, final)
        _fsync_dir(self.directory)
        self.files_published += 1
        return final

    def discard_unwritten(self) -> None:
        """After a failed write: cut the open file after its last good batch and publish it.

        Anything that fails here stays in staging for `recover_staging()`.
        """
        stream, path, good_size = self._stream, self._path, self._size
        if stream is None or path is None:
            return
        self._stream = None
        self._path = None
        try:
            stream.close()
        except OSError:
            logger.debug("closing the failed event file %s also failed", path)
        try:
            if good_size == 0:
                path.unlink()
                return
            os.truncate(path, good_size)
            os.replace(path, self.directory / path.name)
            self.files_published += 1
        except OSError as error:
            logger.warning(
                "event sink could not publish %s after a write error (%s); it stays in staging "
                "and is recovered at the next start",
                path,
                error,
            )

    def _open(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        now = self._clock()
        while True:
            self._sequence += 1
            name = f"events-{_utc_stamp(now)}-{self._tag}-{self._sequence:06d}.json"
            path = self.staging / name
            if not path.exists() and not (self.directory / name).exists():
                break
        self._stream = path.open("xb")
        self._path = path
        self._opened_at = now
        self._size = 0
