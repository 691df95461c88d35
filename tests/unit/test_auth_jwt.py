"""plugins.auth_jwt in-process: keys and algorithms (HS256, RS256, ES256, JWKS), the claims,
the `acl` claim in EMQX's shapes, and an HS256 token made with a public key refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from core.client import ClientInfo
from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthResult, Decision
from hooks.events import AuthenticateRequest, AuthorizeAction, AuthorizeRequest
from plugins.auth_jwt import Plugin, parse_acl_claim
from plugins.base import PluginConfigError, PluginContext

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
SECRET = "a shared secret of 32 bytes or more"


def pem(key: Any) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def client(client_id: str = "dev-1", username: str | None = "alice") -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=username,
        peer="127.0.0.1:4000",
        protocol_version=5,
        clean_start=True,
        keepalive=60,
    )


def build(tmp_path: Path, **options: object) -> Plugin:
    return Plugin(options, PluginContext(tmp_path, "node", 0, "plugins.auth_jwt"))


def login(plugin: Plugin, token: str, who: ClientInfo | None = None) -> Any:
    return plugin.authenticate(AuthenticateRequest(client=who or client(), password=token.encode()))


def ask(plugin: Plugin, action: str, topic: str, qos: int = 0) -> Decision:
    request = AuthorizeRequest(
        client=client(), action=AuthorizeAction(action), topic=topic, qos=qos
    )
    return plugin.authorize(request)


def test_es256_with_a_pem_key_and_the_expiry_in_the_result(tmp_path: Path) -> None:
    (tmp_path / "ec.pem").write_bytes(pem(EC_KEY))
    plugin = build(tmp_path, public_key="ec.pem")
    exp = int(time.time()) + 60
    result = login(plugin, jwt.encode({"exp": exp}, EC_KEY, algorithm="ES256"))
    assert result == AuthResult(allowed=True, expires_at=float(exp))
    other = ec.generate_private_key(ec.SECP256R1())
    assert login(plugin, jwt.encode({}, other, algorithm="ES256")) is AUTH_BAD_CREDENTIALS


def test_a_jwks_file_picks_the_key_by_its_id(tmp_path: Path) -> None:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key()))
    jwks = {"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    plugin = build(tmp_path, jwks_file="jwks.json")
    token = jwt.encode({"sub": "x"}, RSA_KEY, algorithm="RS256", headers={"kid": "k1"})
    assert login(plugin, token) is Decision.ALLOW
    unknown = jwt.encode({"sub": "x"}, RSA_KEY, algorithm="RS256", headers={"kid": "k2"})
    assert login(plugin, unknown) is AUTH_BAD_CREDENTIALS


def test_an_hs256_token_keyed_with_the_public_key_is_refused(tmp_path: Path) -> None:
    """Algorithm confusion: without `secret`, HS256 has no key at all."""
    (tmp_path / "rsa.pem").write_bytes(pem(RSA_KEY))
    plugin = build(tmp_path, public_key="rsa.pem")
    forged = hmac_token(pem(RSA_KEY))
    assert login(plugin, forged) is AUTH_BAD_CREDENTIALS
    assert login(plugin, jwt.encode({}, None, algorithm="none")) is AUTH_BAD_CREDENTIALS


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hmac_token(secret: bytes) -> str:
    """An HS256 token with `secret` as key, made by hand (PyJWT refuses PEM secrets)."""
    signing = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(b'{"sub":"x"}')
    signature = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{b64(signature)}"


def test_a_password_that_is_not_a_jwt_is_left_to_other_plugins(tmp_path: Path) -> None:
    plugin = build(tmp_path, secret=SECRET)
    assert login(plugin, "plain password") is Decision.IGNORE
    assert login(plugin, "a.b.c") is AUTH_BAD_CREDENTIALS  # JWT-shaped: refused


def test_the_acl_claim_decides_first_match_with_placeholders(tmp_path: Path) -> None:
    plugin = build(tmp_path, secret=SECRET)
    acl = [
        {"permission": "deny", "action": "all", "topic": "devices/${clientid}/secret"},
        {"permission": "allow", "action": "all", "topic": "devices/${clientid}/#"},
        {"permission": "allow", "action": "subscribe", "topic": "eq news/#", "qos": [0]},
        {"permission": "allow", "action": "publish", "topic": "users/${username}/+"},
    ]
    assert login(plugin, jwt.encode({"acl": acl}, SECRET, algorithm="HS256")) is Decision.ALLOW
    assert ask(plugin, "publish", "devices/dev-1/temp") is Decision.ALLOW
    assert ask(plugin, "subscribe", "devices/dev-1/#") is Decision.ALLOW
    assert ask(plugin, "publish", "devices/dev-1/secret") is Decision.DENY
    assert ask(plugin, "publish", "devices/dev-2/temp") is Decision.IGNORE
    assert ask(plugin, "subscribe", "news/#") is Decision.ALLOW
    assert ask(plugin, "subscribe", "news/#", qos=1) is Decision.IGNORE
    assert ask(plugin, "subscribe", "news/today") is Decision.IGNORE  # eq: the filter only
    assert ask(plugin, "publish", "users/alice/x") is Decision.ALLOW
    assert ask(plugin, "subscribe", "users/alice/x") is Decision.IGNORE


def test_emqx_4_acl_claims_and_bad_claims() -> None:
    rules = parse_acl_claim({"pub": ["a/#"], "sub": ["b"]}, "c", None)
    assert [(r.allow, r.actions, r.topic) for r in rules] == [
        (True, ("publish",), "a/#"),
        (True, ("subscribe",), "b"),
    ]
    assert (
        parse_acl_claim(
            [{"permission": "allow", "action": "all", "topic": "u/${username}"}], "c", None
        )
        == ()
    )
    for bad in (
        "a/#",
        [{"permission": "maybe", "action": "all", "topic": "t"}],
        [{"permission": "allow", "action": "all", "topic": "a/#/b"}],
        [{"permission": "allow", "action": "all", "topic": "t", "retain": True}],
        {"write": ["t"]},
    ):
        with pytest.raises(ValueError, match="acl claim"):
            parse_acl_claim(bad, "c", "u")


def test_a_bad_acl_claim_refuses_the_token(tmp_path: Path) -> None:
    plugin = build(tmp_path, secret=SECRET)
    token = jwt.encode({"acl": "everything"}, SECRET, algorithm="HS256")
    assert login(plugin, token) is AUTH_BAD_CREDENTIALS


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "set a key"),
        ({"secret": SECRET, "from_field": "clientid"}, "'from_field' must be"),
        ({"public_key": "missing.pem"}, "public_key .*missing.pem"),
        ({"jwks_url": "file:///etc/jwks"}, "'jwks_url' must be an http"),
    ],
)
def test_bad_options_stop_the_broker(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(PluginConfigError, match=message):
        build(tmp_path, **options)
