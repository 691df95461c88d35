"""SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash), both ends, as pure functions over bytes.

The exchange (RFC 5802 section 3), as MQTT 5.0 enhanced authentication carries it:

    client-first  "n,,n=user,r=<client nonce>"                  CONNECT Authentication Data
    server-first  "r=<client+server nonce>,s=<salt>,i=<count>"  AUTH 0x18
    client-final  "c=biws,r=<nonce>,p=<ClientProof>"             AUTH 0x18
    server-final  "v=<ServerSignature>"                          CONNACK (or AUTH 0x00)

The server keeps, per user, only a `ScramCredential`: the salt, the iteration count,
StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword,
"Server Key"). Neither lets anyone log in (RFC 5802 section 9); `make_credential` derives
them from a password once, so the broker never runs PBKDF2 while a client waits. The stored
form is PostgreSQL's: `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64).

Supported: the GS2 header "n,," or "y,," (no channel binding) without an authzid;
user names with the `=2C`/`=3D` escapes. Refused (ScramError): channel binding ("p="),
an authzid, a nonce that does not extend the client's, a wrong channel-binding echo, a bad
proof. Passwords are used as their UTF-8 bytes: SASLprep (RFC 4013) is not applied, which
is the same for every ASCII password.

An unknown user gets a server-first like a known one (a salt and count derived from the
name with a per-process secret) and fails only at the proof, so the exchange does not tell
which users exist (RFC 5802 section 5.1, "i=").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass

METHOD = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096  # the minimum RFC 7677 section 4 asks for
SALT_LENGTH = 16
NONCE_LENGTH = 18  # random bytes, sent base64: 24 printable characters
_KEY_LENGTH = 32  # SHA-256
_GS2_HEADERS = ("n,,", "y,,")


class ScramError(ValueError):
    """A SCRAM message is malformed or does not verify; the message says which."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ScramError(f"{what} is not valid base64") from error


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def new_nonce() -> str:
    return _b64(os.urandom(NONCE_LENGTH))


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def encode(self) -> str:
        return (
            f"{METHOD}${self.iterations}:{_b64(self.salt)}"
            f"${_b64(self.stored_key)}:{_b64(self.server_key)}"
        )


def make_credential(
    password: bytes, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """The stored keys of `password` with a random (or the given) salt."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    salt = os.urandom(SALT_LENGTH) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
    stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    return ScramCredential(salt, iterations, stored_key, _hmac(salted, b"Server Key"))


def parse_credential(text: str) -> ScramCredential:
    """Decode `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`."""
    method, _, rest = text.partition("$")
    parts = rest.split("$")
    if method != METHOD or len(parts) != 2:
        raise ValueError(f"expected {METHOD}$<iterations>:<salt>$<StoredKey>:<ServerKey>")
    iterations_text, _, salt_text = parts[0].partition(":")
    stored_text, _, server_text = parts[1].partition(":")
    if not iterations_text.isdigit() or int(iterations_text) < 1:
        raise ValueError(f"iteration count {iterations_text!r} is not a positive integer")
    try:
        salt = base64.b64decode(salt_text, validate=True)
        stored_key = base64.b64decode(stored_text, validate=True)
        server_key = base64.b64decode(server_text, validate=True)
    except binascii.Error as error:
        raise ValueError(f"salt or key is not valid base64 ({error})") from error
    if not salt or len(stored_key) != _KEY_LENGTH or len(server_key) != _KEY_LENGTH:
        raise ValueError(f"the salt is empty or a key is not {_KEY_LENGTH} bytes")
    return ScramCredential(salt, int(iterations_text), stored_key, server_key)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    """The `k=value` attributes of a SCRAM message, in order (RFC 5802 section 5.1)."""
    pairs = []
    for item in message.split(","):
        key, equals, value = item.partition("=")
        if len(key) != 1 or not equals:
            raise ScramError(f"{what}: attribute {item[:20]!r} is not k=value")
        pairs.append((key, value))
    return pairs


def _decode_name(saslname: str) -> str:
    """RFC 5802 section 5.1: '=2C' is ',' and '=3D' is '='; any other '=' is an error."""
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise ScramError("user name holds '=' not followed by 2C or 3D")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """A parsed client-first message."""

    gs2_header: str
    username: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage


def parse_client_first(data: bytes) -> ClientFirst:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScramError("client-first is not UTF-8") from error
    header = next((h for h in _GS2_HEADERS if text.startswith(h)), None)
    if header is None:
        raise ScramError(
            "client-first must start with 'n,,' or 'y,,' (channel binding and authzid are "
            "not supported)"
        )
    bare = text[len(header) :]
    pairs = _attributes(bare, "client-first")
    if len(pairs) < 2 or pairs[0][0] != "n" or pairs[1][0] != "r":
        raise ScramError("client-first must be n=<user>,r=<nonce>[,...]")
    username, nonce = _decode_name(pairs[0][1]), pairs[1][1]
    if not username or not nonce:
        raise ScramError("client-first has an empty user name or nonce")
    return ClientFirst(header, username, nonce, bare)


@dataclass(frozen=True, slots=True)
class ServerExchange:
    """The server's state between server-first and client-final."""

    client_first: ClientFirst
    server_first: str
    nonce: str  # client nonce + server nonce
    credential: ScramCredential | None  # None: unknown user, the proof will not verify


def server_first(
    client_first: ClientFirst,
    credential: ScramCredential | None,
    server_nonce: str,
    decoy: ScramCredential,
) -> ServerExchange:
    """Answer a client-first. For an unknown user (`credential` None) the salt and count
    of `decoy` are announced instead, and the exchange fails at the proof."""
    announced = credential or decoy
    nonce = client_first.nonce + server_nonce
    message = f"r={nonce},s={_b64(announced.salt)},i={announced.iterations}"
    return ServerExchange(client_first, message, nonce, credential)


def server_final(exchange: ServerExchange, client_final: bytes) -> bytes:
    """Verify the client's proof; the server-final message (`v=...`) if it holds, else
    ScramError."""
    try:
        text = client_final.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScramError("client-final is not UTF-8") from error
    without_proof, separator, proof_text = text.rpartition(",p=")
    if not separator:
        raise ScramError("client-final has no proof (p=)")
    pairs = dict(_attributes(without_proof, "client-final"))
    expected_binding = _b64(exchange.client_first.gs2_header.encode("ascii"))
    if pairs.get("c") != expected_binding:
        raise ScramError("client-final channel binding (c=) does not echo the GS2 header")
    if pairs.get("r") != exchange.nonce:
        raise ScramError("client-final nonce (r=) is not the one the server sent")
    proof = _unb64(proof_text, "client proof")
    credential = exchange.credential
    auth_message = f"{exchange.client_first.bare},{exchange.server_first},{without_proof}".encode()
    if credential is None or len(proof) != _KEY_LENGTH:
        raise ScramError("unknown user or wrong proof")
    client_key = _xor(proof, _hmac(credential.stored_key, auth_message))
    if not hmac.compare_digest(hashlib.sha256(client_key).digest(), credential.stored_key):
        raise ScramError("unknown user or wrong proof")
    return f"v={_b64(_hmac(credential.server_key, auth_message))}".encode()


class ScramClient:
    """The client's side, for tests and tools: `first()`, `final(server_first)`,
    `verify(server_final)` (raises ScramError if the server does not know the password)."""

    def __init__(self, username: str, password: bytes, nonce: str | None = None) -> None:
        self._password = password
        self._nonce = new_nonce() if nonce is None else nonce
        self._bare = f"n={_encode_name(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first_message: bytes) -> bytes:
        text = server_first_message.decode("utf-8")
        pairs = dict(_attributes(text, "server-first"))
        nonce, salt_text, count = pairs.get("r", ""), pairs.get("s", ""), pairs.get("i", "")
        if not nonce.startswith(self._nonce) or not count.isdigit():
            raise ScramError("server-first: the nonce does not extend ours, or no i=")
        salted = hashlib.pbkdf2_hmac(
            "sha256", self._password, _unb64(salt_text, "salt"), int(count)
        )
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = _hmac(salted, b"Client Key")
        signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def verify(self, server_final_message: bytes) -> None:
        expected = f"v={_b64(self._server_signature)}".encode()
        if not self._server_signature or not hmac.compare_digest(server_final_message, expected):
            raise ScramError("server-final does not prove that the server knows the password")
