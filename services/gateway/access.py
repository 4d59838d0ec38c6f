"""Who is calling: the API key in ``Authorization: Bearer`` (or ``x-api-key``), its rate limit and
its scopes. Every ``/v1`` route depends on :meth:`Access.principal`; nothing past it sees a key."""

from __future__ import annotations

from fastapi import Request

from services.common import telemetry
from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.rate_limit import RateLimiter


class Access:
    def __init__(self, keys: ApiKeyStore, rate_limit_per_minute: int) -> None:
        self.keys = keys
        self.limit_per_minute = rate_limit_per_minute
        self.limiter = RateLimiter(rate_limit_per_minute)

    def principal(self, request: Request) -> Principal:
        """The caller the key names (401 without a valid key, 429 over its rate limit)."""
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key")
        key_id, who = self.keys.authenticate(key)
        ok, wait = self.limiter.allow(key_id)
        if not ok:
            raise RampartError(
                ErrorCode.RATE_LIMITED,
                f"rate limit of {self.limit_per_minute} requests/minute exceeded; retry later",
                retry_after_s=round(wait, 2),
            )
        telemetry.tenant_id.set(who.tenant)
        return who


def require(who: Principal, scope: str) -> None:
    """403 unless the caller's key carries ``scope``."""
    if not who.can(scope):
        raise RampartError(
            ErrorCode.PERMISSION_DENIED,
            f"this API key lacks the '{scope}' scope; create a key with --scopes {scope}",
        )
