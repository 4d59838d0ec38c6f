"""How verified claims become a principal, with every claim remapped as an enterprise IdP needs it
(Keycloak: ``preferred_username``, ``realm_access.roles``, OAuth's space-separated ``scope``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.gateway.config import OidcSettings
from services.gateway.oidc import OidcVerifier


def verifier(tmp_path: Path, **mapping: str) -> OidcVerifier:
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    return OidcVerifier(OidcSettings(issuer="https://idp/", audience="rampart", jwks_file=jwks, **mapping))


def test_every_claim_can_be_remapped(tmp_path: Path) -> None:
    v = verifier(
        tmp_path,
        tenant_claim="org.id",
        user_claim="preferred_username",
        groups_claim="realm_access.roles",
        scopes_claim="scope",
    )
    claims = {
        "sub": "f81d4fae-7dec",
        "preferred_username": "alice",
        "org": {"id": "acme"},
        "realm_access": {"roles": ["hr", "eng", 7]},
        "groups": ["ignored"],
        "scope": "openid search ingest",
    }
    subject, who = v._map(claims)
    assert subject == "oidc:acme:alice"
    assert (who.tenant, who.user, who.groups, who.scopes) == (
        "acme",
        "alice",
        ["hr", "eng"],
        ["search", "ingest"],
    )


def test_a_missing_mapped_claim_names_the_setting(tmp_path: Path) -> None:
    v = verifier(tmp_path, user_claim="preferred_username", default_tenant="acme")
    with pytest.raises(RampartError) as err:
        v._map({"sub": "x"})
    assert err.value.code is ErrorCode.UNAUTHENTICATED and "gateway.oidc.user_claim" in err.value.message
    _, who = v._map({"preferred_username": "bob"})
    assert (who.tenant, who.groups, who.scopes) == ("acme", [], ["search"])  # defaults when absent
