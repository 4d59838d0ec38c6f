"""Settings of the HTTP gateway: :class:`GatewaySettings` (``gateway``), read by the app (bind
address, request limits, rate limits, the API-key file, OIDC bearer tokens, the audit log); the
ingest service reads ``max_document_bytes`` and the conversational rewrite ``max_query_chars``, the
limits the gateway enforces first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

from services.common.types import DEFAULT_TOP_K

# What one request of each kind takes from its key's and tenant's budget. An answer runs the adaptive
# pipeline (routing, possibly a chain of 3-6 retrievals, grading, fact-check, answer): measured at
# 3-5 times a search's work, so it costs 4; reading a document's status is a lookup.
# Feedback is a lookup and an append.
Action = Literal["search", "answer", "ingest", "status", "delete", "feedback"]
DEFAULT_COSTS: dict[Action, int] = {
    "search": 1, "answer": 4, "ingest": 2, "status": 1, "delete": 1, "feedback": 1,
}  # fmt: skip


class OidcSettings(BaseModel):
    """OIDC/JWT bearer tokens accepted besides API keys (off until ``issuer`` is set)."""

    issuer: str | None = Field(
        default=None, description="Expected 'iss' of bearer JWTs; unset: JWTs are not accepted"
    )
    audience: str | None = Field(default=None, description="Expected 'aud' (required with issuer)")
    jwks_file: Path | None = Field(default=None, description="JWKS JSON file with the signing keys")
    jwks_url: str | None = Field(
        default=None, description="JWKS URL (fetched with a timeout, cached jwks_cache_s; new kid refetches)"
    )
    jwks_timeout_s: float = Field(default=5.0, gt=0.0, le=60.0, description="Timeout of one JWKS fetch")
    jwks_cache_s: float = Field(default=300.0, ge=0.0, description="How long a fetched JWKS is reused")
    jwks_refetch_s: float = Field(
        default=30.0,
        ge=0.0,
        description="Shortest time between two fetches for an unknown kid (tokens with random kids cannot "
        "make the gateway hammer the provider)",
    )
    algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "ES256", "PS256", "EdDSA"],
        description="Accepted signature algorithms (asymmetric only: 'none' and HS* are refused)",
    )
    leeway_s: float = Field(default=30.0, ge=0.0, le=600.0, description="Clock skew allowed on exp/nbf/iat")
    tenant_claim: str = Field(default="tenant", description="Claim naming the tenant (dotted path allowed)")
    default_tenant: str | None = Field(
        default=None, description="Tenant of tokens without tenant_claim (single-tenant deployments)"
    )
    user_claim: str = Field(default="sub", description="Claim naming the user (ACLs name users)")
    groups_claim: str = Field(default="groups", description="Claim listing the user's groups")
    scopes_claim: str = Field(
        default="scope", description="Claim with the Rampart scopes (space-separated string or list)"
    )
    default_scopes: list[str] = Field(
        default_factory=lambda: ["search"], description="Scopes of a token whose scopes_claim is absent"
    )

    @model_validator(mode="after")
    def _complete(self) -> OidcSettings:
        if self.issuer is None:
            return self
        if not self.audience:
            raise ValueError(
                f"gateway.oidc.issuer is {self.issuer!r} but gateway.oidc.audience is unset; set "
                "RAMPART_GATEWAY__OIDC__AUDIENCE to the client id your identity provider puts in 'aud'"
            )
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError(
                "gateway.oidc needs exactly one of jwks_file or jwks_url (got "
                f"jwks_file={self.jwks_file!s}, jwks_url={self.jwks_url!r}); set RAMPART_GATEWAY__OIDC__JWKS_URL "
                "to the provider's jwks_uri"
            )
        bad = [a for a in self.algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if bad:
            raise ValueError(
                f"gateway.oidc.algorithms {bad} are refused: a shared-secret or unsigned token could be "
                "forged by anyone holding the JWKS; use RS256, ES256, PS256 or EdDSA"
            )
        return self


class AuditSettings(BaseModel):
    """The audit log: one JSON object per line for every search, answer, ingest, status and delete."""

    path: Path | None = Field(default=None, description="JSON-lines audit file; unset: no audit log")
    include_text: bool = Field(
        default=False, description="Also record queries and answers (off: ids, counts and hashes only)"
    )


class GatewaySettings(BaseModel):
    host: str = Field(default="127.0.0.1", description="Bind address (0.0.0.0 to expose)")
    port: int = Field(default=8080, ge=1, le=65535, description="HTTP port")
    api_keys_file: Path | None = Field(
        default=None, description="JSON file of hashed API keys; default <data_dir>/api-keys.json"
    )
    max_body_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1024, description="Largest request body, counted as it streams in"
    )
    max_document_bytes: int = Field(default=5 * 1024 * 1024, ge=1, description="Largest single document")
    max_batch_documents: int = Field(default=256, ge=1, description="Documents per ingest request")
    max_top_k: int = Field(
        default=100,
        ge=DEFAULT_TOP_K,
        le=1000,
        description=f"Largest top_k a search may ask; at least {DEFAULT_TOP_K}, the top_k of a request that "
        "omits it (a smaller limit would refuse such a request, which the OpenAPI document admits)",
    )
    max_query_chars: int = Field(default=2000, ge=1, description="Longest query")
    rate_limit_per_minute: int = Field(
        default=600, ge=0, description="Cost units per minute per API key or token subject; 0 disables"
    )
    tenant_rate_limit_per_minute: int = Field(
        default=0, ge=0, description="Cost units per minute per tenant, all its callers together; 0 disables"
    )
    anonymous_rate_limit_per_minute: int = Field(
        default=60,
        ge=0,
        description="Requests per minute per client IP without valid credentials (failed authentications "
        "and /readyz); 0 disables",
    )
    costs: dict[Action, Annotated[int, Field(ge=0, le=1000)]] = Field(
        default_factory=lambda: dict(DEFAULT_COSTS),
        description="Cost units of one request of each kind against the rate limits",
    )
    rate_limit_redis_url: SecretStr | None = Field(
        default=None,
        description="Redis URL for the rate limits shared by every gateway replica; unset: in-process",
    )
    readiness_details_scope: str = Field(
        default="admin", description="Scope a key needs to read the per-stage readiness at /v1/readiness"
    )
    readiness_details_from_loopback: bool = Field(
        default=False,
        description="Give /readyz's per-stage details to every caller on 127.0.0.1/::1 (off: a reverse proxy "
        "on the same host would hand them to anyone; the stack's readiness wait sends the internal token)",
    )
    oidc: OidcSettings = OidcSettings()
    audit: AuditSettings = AuditSettings()
