"""`python -m plugins.auth_file add FILE USER`: add or update a user in a password file.

Writes the `$7$` (PBKDF2-HMAC-SHA512) format that Mosquitto and mosquitto_passwd read, so
either tool can manage the same file. The password comes from a prompt (asked twice), from
`--password` (visible in the process list: tests and throwaway set-ups only) or from the
first line of standard input with `--password-stdin` (scripts). The file is rewritten
atomically (a temporary file renamed over it); a new file is created with mode 0600. Send
the broker SIGHUP to make it re-read the file.
"""

from __future__ import annotations

import sys

from plugins.account_files import AccountTool
from plugins.auth_file import (
    DEFAULT_ITERATIONS,
    PasswordFileError,
    hash_password,
    parse_password_file,
)

TOOL = AccountTool(
    prog="python -m plugins.auth_file",
    description="Manage a Mosquitto-format password file for the auth_file plugin.",
    file_kind="password file",
    default_iterations=DEFAULT_ITERATIONS,
    iterations_help="PBKDF2 iterations, like mosquitto_passwd",
    check_file=parse_password_file,
    make_entry=lambda password, iterations: hash_password(password, iterations).encode(),
    file_error=PasswordFileError,
)
main = TOOL.main

if __name__ == "__main__":
    sys.exit(main())
