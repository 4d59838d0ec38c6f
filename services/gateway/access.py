"""Who is calling and whether they may, now: every ``/v1`` route depends on :meth:`Access.caller`.

The credential is the bearer token in ``Authorization`` (or ``x-api-key``): an API key (``rk_…``,
``api_keys.py``) or, when ``gateway.oidc`` is configured, a JWT from the identity provider
(``oidc.py``). Then the rate limits, weighted by what the request costs (``gateway.costs``): the
caller's own budget (per key, or per token subject) and the tenant's (all its callers together, so one
tenant cannot take every replica's capacity with many keys). A request without valid credentials
draws from its client address's budget instead (``anonymous_rate_limit_per_minute``); once that is
spent the address's failures answer 429 instead of 401, so guessing keys or replaying stolen, expired
tokens costs the attacker time. A valid credential from the same address still passes (colleagues
behind one NAT are not locked out by one bad client); only failures count.

Nothing past this module sees a key or a token; routes get a :class:`Caller`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request

from services.common import telemetry
from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.audit import AuditEvent, AuditSink, NoAudit
from services.gateway.config import DEFAULT_COSTS, Action, GatewaySettings
from services.gateway.oidc import OidcVerifier, looks_like_jwt
from services.gateway.rate_limit import Limiter

_KEY_ID = re.compile(r"[0-9a-f]{1,32}")


@dataclass(frozen=True)
class Caller:
    """The authenticated caller: its principal, the credential it used (for audit and limits), the
    client address, and what its key says about the documents it writes."""

    principal: Principal
    credential: str  # "key:<id>" or "oidc:<tenant>:<user>"
    client: str
    source: str | None = None  # the key's source namespace (a connector's), None: any
    trust: str = ""  # the key's trust level for the documents it writes


class Access:
    def __init__(
        self,
        keys: ApiKeyStore,
        settings: GatewaySettings,
        limiter: Limiter,
        oidc: OidcVerifier | None = None,
        audit: AuditSink | None = None,
    ) -> None:
        self.keys = keys
        self.settings = settings
        self.limiter = limiter
        self.oidc = oidc
        self.audit = audit if audit is not None else NoAudit()
        self.costs: dict[Action, int] = {**DEFAULT_COSTS, **settings.costs}

    def caller(self, action: Action) -> Callable[[Request], Caller]:
        """The dependency of a route doing ``action`` (a key of ``gateway.costs``)."""
        cost = self.costs[action]

        def dependency(request: Request) -> Caller:
            return self.authenticate(request, cost)

        return dependency

    def authenticate(self, request: Request, cost: int) -> Caller:
        """The caller, charged ``cost``: 401 without valid credentials, 429 over a limit."""
        client = request.client.host if request.client is not None else "unknown"
        try:
            caller = self._identify(request, client)
        except RampartError as exc:
            if exc.code is ErrorCode.UNAUTHENTICATED:
                anon_rate = self.settings.anonymous_rate_limit_per_minute
                ok, wait = self.limiter.take(f"ip:{client}", 1, anon_rate)  # only failures draw
                self._denied(request, client, "denied" if ok else "limited", exc.message)
                if not ok:
                    raise self._limited(
                        f"{anon_rate} unauthenticated requests/minute from {client}", wait
                    ) from exc
            raise
        who = caller.principal
        ok, wait = self.limiter.take(f"caller:{caller.credential}", cost, self.settings.rate_limit_per_minute)
        if not ok:
            raise self._limited(
                f"{self.settings.rate_limit_per_minute} cost units/minute for this caller "
                f"(this request costs {cost})",
                wait,
            )
        tenant_rate = self.settings.tenant_rate_limit_per_minute
        ok, wait = self.limiter.take(f"tenant:{who.tenant}", cost, tenant_rate)
        if not ok:
            raise self._limited(f"{tenant_rate} cost units/minute for tenant {who.tenant!r}", wait)
        telemetry.tenant_id.set(who.tenant)
        return caller

    def anonymous(self, request: Request) -> None:
        """Charge an unauthenticated request (``/readyz``) to its client address: 429 when spent.
        Readiness may call every stage (in the stack, over the network), so a flood of probes from
        one address is work for the whole deployment."""
        client = request.client.host if request.client is not None else "unknown"
        rate = self.settings.anonymous_rate_limit_per_minute
        ok, wait = self.limiter.take(f"ip:{client}", 1, rate)
        if not ok:
            raise self._limited(f"{rate} unauthenticated requests/minute from {client}", wait)

    def _identify(self, request: Request, client: str) -> Caller:
        header = request.headers.get("authorization", "")
        token = (
            header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key")
        )
        if token and looks_like_jwt(token):
            if self.oidc is None:
                raise RampartError(
                    ErrorCode.UNAUTHENTICATED,
                    "bearer JWTs are not accepted here (gateway.oidc.issuer is unset); send an API key rk_…",
                )
            subject, who = self.oidc.principal(token)
            return Caller(who, subject, client)
        rec = self.keys.authenticate_record(token)
        return Caller(rec.principal, f"key:{rec.id}", client, rec.source, rec.trust)

    def _denied(self, request: Request, client: str, outcome: str, why: str) -> None:
        """A failed authentication in the audit log: the address, which key id it named (the part of
        an ``rk_<id>_<secret>`` key that is not secret), and why; never the credential."""
        header = request.headers.get("authorization", "") or request.headers.get("x-api-key", "")
        named = header.rsplit(" ", 1)[-1]
        parts = named.split("_")
        if named.startswith("rk_") and len(parts) >= 3:
            # the id as sent: attacker-chosen, so only a plausible one is kept
            credential = f"key:{parts[1]}" if _KEY_ID.fullmatch(parts[1]) else "key:?"
        else:
            credential = "jwt" if looks_like_jwt(named) else "none"
        self.audit.record(
            AuditEvent(
                action="authenticate",
                outcome=outcome,
                tenant="",
                user="",
                credential=credential,
                client=client,
                request_id=getattr(request.state, "request_id", ""),
                detail=why,
            )
        )

    @staticmethod
    def _limited(what: str, wait: float) -> RampartError:
        return RampartError(
            ErrorCode.RATE_LIMITED,
            f"rate limit of {what} exceeded; retry after {wait:.1f}s",
            retry_after_s=round(wait, 2),
        )


def require(who: Principal, scope: str) -> None:
    """403 unless the caller's key carries ``scope``."""
    if not who.can(scope):
        raise RampartError(
            ErrorCode.PERMISSION_DENIED,
            f"this API key lacks the '{scope}' scope; create a key with --scopes {scope}",
        )
