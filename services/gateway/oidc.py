"""OIDC/JWT bearer tokens, besides API keys: an enterprise's identity provider signs a token, Rampart
checks it and maps its claims to the caller (tenant, user, groups, scopes) by configuration.

What is checked, and why each: the signature against the provider's JWKS (only asymmetric algorithms:
with HS256 anyone who can read the public JWKS could sign), ``iss`` (a token from another provider
trusted for something else is not ours), ``aud`` (a token the same provider issued to another
application must not open this one), ``exp`` (required; a stolen token dies), ``nbf``/``iat`` with
``leeway_s`` of clock skew.

Keys come from a JWKS file (re-read when it changes) or URL: fetched on first use with a timeout (a
slow provider must not hang requests), cached for ``jwks_cache_s``, and fetched again when a token
names a ``kid`` the cache lacks (the provider rotated its keys) at most every ``jwks_refetch_s``, so
tokens with random ``kid`` s cannot turn the gateway into a load generator against the provider.

Usage: ``OidcVerifier(settings.gateway.oidc).principal(token)`` -> :class:`Principal` or 401.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
from pydantic import ValidationError

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.gateway.config import OidcSettings


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts: an API key (``rk_…``) never has two dots."""
    return token.count(".") == 2 and not token.startswith("rk_")


def _unauthenticated(why: str) -> RampartError:
    return RampartError(ErrorCode.UNAUTHENTICATED, f"invalid bearer token: {why}")


class JwksSource:
    """The signing keys by ``kid``, from a file or a URL (see the module docstring for caching)."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at = -1e18
        self._stamp: tuple[int, int, int] | None = None

    def key(self, kid: str | None) -> jwt.PyJWK:
        with self._lock:
            self._refresh(force=False)
            found = self._pick(kid)
            if found is None and time.monotonic() - self._loaded_at >= self.settings.jwks_refetch_s:
                self._refresh(force=True)  # a kid we do not know: the provider may have rotated
                found = self._pick(kid)
        if found is None:
            raise _unauthenticated(f"no key {kid!r} in the identity provider's JWKS")
        return found

    def _pick(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def _refresh(self, *, force: bool) -> None:
        s = self.settings
        if s.jwks_file is not None:
            self._from_file(s.jwks_file)
            return
        if not force and time.monotonic() - self._loaded_at < s.jwks_cache_s:
            return
        url = s.jwks_url or ""
        try:
            r = httpx.get(url, timeout=s.jwks_timeout_s, follow_redirects=False)
            r.raise_for_status()
            self._keys = _parse(r.json(), url)
        except (httpx.HTTPError, ValueError) as exc:
            if self._keys:  # keep serving with the keys we have; the next interval retries
                self._loaded_at = time.monotonic()
                return
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"could not fetch the JWKS from {url} ({type(exc).__name__}: {exc}); check "
                "gateway.oidc.jwks_url and that the identity provider answers within jwks_timeout_s",
                stage="oidc",
            ) from exc
        self._loaded_at = time.monotonic()

    def _from_file(self, path: Path) -> None:
        try:
            st = path.stat()
        except OSError as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"cannot read the JWKS file {path} ({exc.strerror}); check gateway.oidc.jwks_file",
                stage="oidc",
            ) from exc
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            try:
                self._keys = _parse(json.loads(path.read_text(encoding="utf-8")), str(path))
            except ValueError as exc:
                raise RampartError(
                    ErrorCode.UNAVAILABLE, f"the JWKS file {path} is not a JWKS: {exc}", stage="oidc"
                ) from exc
            self._stamp = stamp
            self._loaded_at = time.monotonic()


def _parse(data: Any, where: str) -> dict[str, jwt.PyJWK]:
    try:
        keyset = jwt.PyJWKSet.from_dict(data)
    except jwt.PyJWTError as exc:
        raise ValueError(f"{where} holds no usable JSON Web Key Set ({exc})") from exc
    return {k.key_id or f"#{i}": k for i, k in enumerate(keyset.keys)}


class OidcVerifier:
    """Verifies bearer JWTs and maps their claims to a :class:`Principal`."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self.jwks = JwksSource(settings)

    def principal(self, token: str) -> tuple[str, Principal]:
        """``(subject id for rate limits and audit, principal)``; 401 naming what failed otherwise."""
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _unauthenticated(f"not a JWT ({exc})") from exc
        alg = str(header.get("alg", ""))
        if alg not in s.algorithms:
            raise _unauthenticated(
                f"algorithm {alg!r} is not accepted (gateway.oidc.algorithms: {s.algorithms})"
            )
        key = self.jwks.key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=s.audience,
                issuer=s.issuer,
                leeway=s.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise _unauthenticated("expired; get a new token from your identity provider") from exc
        except jwt.InvalidAudienceError as exc:
            raise _unauthenticated(f"audience is not {s.audience!r} (gateway.oidc.audience)") from exc
        except jwt.InvalidIssuerError as exc:
            raise _unauthenticated(f"issuer is not {s.issuer!r} (gateway.oidc.issuer)") from exc
        except jwt.PyJWTError as exc:
            raise _unauthenticated(str(exc)) from exc
        return self._map(claims)

    def _map(self, claims: dict[str, Any]) -> tuple[str, Principal]:
        s = self.settings
        tenant = _claim(claims, s.tenant_claim)
        if tenant is None:
            tenant = s.default_tenant
        user = _claim(claims, s.user_claim)
        if not isinstance(tenant, str) or not tenant:
            raise _unauthenticated(
                f"no tenant in claim {s.tenant_claim!r}; map it with gateway.oidc.tenant_claim "
                "or set gateway.oidc.default_tenant"
            )
        if not isinstance(user, str) or not user:
            raise _unauthenticated(f"no user in claim {s.user_claim!r} (gateway.oidc.user_claim)")
        groups = _strings(_claim(claims, s.groups_claim))
        raw_scopes = _claim(claims, s.scopes_claim)
        scopes = [x for x in _strings(raw_scopes) if x in ("search", "ingest", "admin")]
        if raw_scopes is None:
            scopes = list(s.default_scopes)
        try:
            who = Principal(tenant=tenant, user=user, groups=groups, scopes=scopes)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise _unauthenticated(f"claim mapped to {where} is not a valid name ({problem['msg']})") from exc
        return f"oidc:{tenant}:{user}", who


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into nested objects (``realm_access.roles``)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _strings(value: Any) -> list[str]:
    """A list claim, or a space-separated string (OAuth's ``scope``)."""
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []
