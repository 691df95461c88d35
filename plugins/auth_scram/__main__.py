"""`python -m plugins.auth_scram add FILE USER`: add or update a user in a SCRAM credentials file.

Writes `user:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (a random salt; the
keys derived from the password, which is not stored). The password comes from a prompt
(asked twice), `--password` or `--password-stdin` (`plugins.account_files`); the file is
rewritten atomically. Send the broker SIGHUP to make it re-read the file.
"""

from __future__ import annotations

import sys

from plugins.account_files import AccountTool
from plugins.auth_scram import CredentialsFileError, parse_credentials_file
from plugins.auth_scram.scram import DEFAULT_ITERATIONS, make_credential

TOOL = AccountTool(
    prog="python -m plugins.auth_scram",
    description="Manage the SCRAM-SHA-256 credentials file of the auth_scram plugin.",
    file_kind="credentials file",
    default_iterations=DEFAULT_ITERATIONS,
    iterations_help="PBKDF2-HMAC-SHA-256 iterations, RFC 7677's minimum",
    check_file=parse_credentials_file,
    make_entry=lambda password, iterations: make_credential(password, iterations).encode(),
    file_error=CredentialsFileError,
)
main = TOOL.main

if __name__ == "__main__":
    sys.exit(main())
