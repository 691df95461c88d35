"""`python -m plugins.auth_scram add FILE USER`: add or update a user in a SCRAM credentials file.

Writes `user:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (a random salt; the
keys derived from the password, which is not stored). The password comes from a prompt
(asked twice), `--password` or `--password-stdin` (`plugins.account_files`); the file is
rewritten atomically. Send the broker SIGHUP to make it re-read the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plugins.account_files import read_password, write_atomically
from plugins.auth_scram import CredentialsFileError, parse_credentials_file
from plugins.auth_scram.scram import DEFAULT_ITERATIONS, make_credential


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m plugins.auth_scram",
        description="Manage the SCRAM-SHA-256 credentials file of the auth_scram plugin.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="add a user, or change the password of one")
    add.add_argument("file", type=Path, help="credentials file (created if missing)")
    add.add_argument("user", help="user name (no ':')")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password itself (shows in `ps`)")
    source.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2-HMAC-SHA-256 iterations (default {DEFAULT_ITERATIONS}, RFC 7677's minimum)",
    )
    return parser


def add_user(path: Path, user: str, password: str, iterations: int) -> None:
    """Set `user`'s credential in `path`, keeping every other line as it is."""
    if not user or ":" in user or any(c in user for c in "\r\n"):
        raise ValueError(f"user name {user!r} must be non-empty, without ':' or line breaks")
    if not password:
        raise ValueError("the password is empty")
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    parse_credentials_file("\n".join(lines), str(path))  # refuse to edit a broken file
    entry = f"{user}:{make_credential(password.encode('utf-8'), iterations).encode()}"
    for index, line in enumerate(lines):
        if line.partition(":")[0].strip() == user:
            lines[index] = entry
            break
    else:
        lines.append(entry)
    write_atomically(path, "".join(f"{line}\n" for line in lines))


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        add_user(args.file, args.user, read_password(args), args.iterations)
    except (ValueError, OSError, CredentialsFileError) as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
