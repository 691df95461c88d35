"""The command-line tool that manages an account file (`python -m plugins.auth_file`,
`python -m plugins.auth_scram`): `AccountTool` is the whole tool (its `add` command, reading
the password, rewriting the file); each plugin gives it only its file's format.

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
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class AccountTool:
    """`add FILE USER`: set one user's entry in an account file, keeping every other line."""

    prog: str
    description: str
    file_kind: str  # "password file", "credentials file"
    default_iterations: int
    iterations_help: str
    check_file: Callable[[str, str], object]  # parses (text, name); raises `file_error`
    make_entry: Callable[[bytes, int], str]  # (password, iterations) -> the text after "user:"
    file_error: type[Exception]

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        commands = parser.add_subparsers(dest="command", required=True)
        add = commands.add_parser("add", help="add a user, or change the password of one")
        add.add_argument("file", type=Path, help=f"{self.file_kind} (created if missing)")
        add.add_argument("user", help="user name (no ':')")
        source = add.add_mutually_exclusive_group()
        source.add_argument("--password", help="the password itself (shows in `ps`)")
        source.add_argument(
            "--password-stdin", action="store_true", help="read the password from standard input"
        )
        add.add_argument(
            "--iterations",
            type=int,
            default=self.default_iterations,
            help=f"{self.iterations_help} (default {self.default_iterations})",
        )
        return parser

    def add_user(self, path: Path, user: str, password: str, iterations: int) -> None:
        """Set `user`'s entry in `path`, keeping every other line as it is."""
        if not user or ":" in user or any(c in user for c in "\r\n"):
            raise ValueError(f"user name {user!r} must be non-empty, without ':' or line breaks")
        if not password:
            raise ValueError("the password is empty")
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        self.check_file("\n".join(lines), str(path))  # refuse to edit a broken file
        entry = f"{user}:{self.make_entry(password.encode('utf-8'), iterations)}"
        for index, line in enumerate(lines):
            if line.partition(":")[0].strip() == user:
                lines[index] = entry
                break
        else:
            lines.append(entry)
        write_atomically(path, "".join(f"{line}\n" for line in lines))

    def main(self, argv: list[str] | None = None) -> int:
        parser = self.parser()
        args = parser.parse_args(argv)
        try:
            self.add_user(args.file, args.user, read_password(args), args.iterations)
        except (ValueError, OSError, self.file_error) as error:
            parser.exit(1, f"{parser.prog}: error: {error}\n")
        return 0
