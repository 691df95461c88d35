"""What the command-line tools that manage account files share (`python -m plugins.auth_file`,
`python -m plugins.auth_scram`): reading a password, and rewriting a file atomically.

The password comes from `--password` (visible in the process list: tests and throwaway
set-ups only), from the first line of standard input with `--password-stdin` (scripts), or
from a prompt asked twice. A file is rewritten through a temporary file renamed over it,
keeping its mode; a new file gets mode 0600.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import tempfile
from pathlib import Path


def read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("Password: ")
    if first != getpass.getpass("Reenter password: "):
        raise ValueError("the passwords do not match")
    return first


def write_atomically(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
