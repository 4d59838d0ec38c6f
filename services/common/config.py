"""Settings shared by several stages: the LLM endpoint, where the distributed services are, the
shape of one gRPC server, and what kind of corpus each tenant holds.

- :class:`LlmSettings` (``llm``): read by every stage that asks a model (the fact-check's judge, the
  chain's sub-query proposer, the CRAG rewrite, conversational rewrites and answers);
- :class:`RemoteSettings` (``remote``): read by the callers of the retrieval and ingest services (the
  runtime, the gateway's backends) and by the gateway's forwarding to the orchestrator;
- :class:`GrpcServerSettings`: the shape of one gRPC server, read by :mod:`services.common.grpc_server`;
  :class:`RetrievalServiceSettings` (``retrieval_service``) and the ingest service's settings extend it
  with their own callers (``allowed_callers``, docs/security.md);
- :class:`CorpusSettings` (``corpus``): each tenant's :class:`CorpusProfile`, read per request by the
  search pipeline (fusion's link stream, the rerank lift, the fact-check's title rules) and the
  orchestrator (evidence pairs, the chain's title ordering); docs/corpus-profiles.md.

:mod:`services.common.settings` composes these with each stage's own ``config.py``; nothing here
imports it.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import NoDecode

from services.common.types import NAME_PATTERN

ANY_CALLER = "*"
"""In ``allowed_callers``: any client certificate of the deployment's CA may call (no per-service check)."""


class LlmSettings(BaseModel):
    """An OpenAI-compatible chat endpoint (llama.cpp server, vLLM, a hosted API); shared by the stages
    that ask a model (the fact-check judge now, answers later)."""

    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1; unset = no LLM",
    )
    model: str = Field(default="default", description="Model name sent with every request")
    api_key: SecretStr | None = Field(
        default=None, description="Sent as 'Authorization: Bearer ...' when set; never logged"
    )
    timeout_s: float = Field(
        default=10, gt=0.0, le=600.0, description="Per-request timeout; past it the call counts as no answer"
    )
    max_tokens: int = Field(default=96, ge=8, le=4096, description="Longest reply asked of the model")
    retries: int = Field(
        default=1, ge=0, le=10, description="Retries on connection errors and HTTP 5xx/429 only"
    )

    @model_validator(mode="after")
    def _url(self) -> LlmSettings:
        if self.base_url is not None:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                shown = "<url with credentials>" if parts.password else repr(self.base_url)
                raise ValueError(
                    f"llm.base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {shown}; "
                    "fix RAMPART_LLM__BASE_URL (or unset it to run without an LLM)"
                )
        return self


class GrpcServerSettings(BaseModel):
    """One gRPC service's server (distributed mode; docs/grpc.md)."""

    host: str = Field(default="127.0.0.1", description="Bind address (0.0.0.0 to expose)")
    port: int = Field(default=50051, ge=1, le=65535, description="gRPC port")
    metrics_port: int = Field(
        default=9101, ge=0, le=65535, description="Prometheus /metrics port on the same host; 0 disables"
    )
    grace_s: float = Field(
        default=10.0, ge=0.0, le=600.0, description="On SIGTERM, time in-flight RPCs get to finish"
    )
    max_message_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024, description="Largest request/response"
    )
    max_concurrent_rpcs: int = Field(
        default=64, ge=1, le=100_000, description="RPCs served at once before new ones are refused"
    )
    reflection: bool = Field(
        default=False,
        description="Serve gRPC reflection (grpcurl without the .proto files); off: it maps every method "
        "for whoever reaches the port",
    )
    health_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="A second, plaintext port serving only grpc.health.v1 (kubelet gRPC probes speak "
        "neither TLS nor the token); 0: none, health answers on the main port only",
    )
    allowed_callers: list[str] = Field(
        default=[ANY_CALLER],
        min_length=1,
        description="With mTLS: the client certificate CNs (the component name from `rampart certs dev`, e.g. "
        "orchestrator; the chart: release-component, e.g. rampart-orchestrator) that may call this "
        'service\'s RPCs, others get PERMISSION_DENIED; ["*"]: any certificate of the CA. Health is open',
    )

    @field_validator("allowed_callers")
    @classmethod
    def _callers(cls, names: list[str]) -> list[str]:
        return caller_names("allowed_callers", names)


def caller_names(field: str, names: list[str]) -> list[str]:
    """A list of certificate CNs, checked: blank names would match no certificate and hide a typo;
    ``*`` mixed with names is ambiguous. ``field`` names the setting in the error."""
    cleaned = [n.strip() for n in names]
    if any(not n for n in cleaned):
        raise ValueError(
            f'{field} {names!r} holds an empty name; list component names, e.g. ["orchestrator"]'
        )
    if ANY_CALLER in cleaned and len(cleaned) > 1:
        raise ValueError(
            f'{field} {names!r} mixes "*" with names; use ["*"] (any certificate of the CA) or names only'
        )
    return list(dict.fromkeys(cleaned))


class RetrievalServiceSettings(GrpcServerSettings):
    """The retrieval service's server: its callers are the orchestrator (searches, index reads) and
    ingest (writes), the gRPC edges of docs/architecture.md.

    Each caller gets only its side of the edge (``read_callers``, ``write_callers``;
    :mod:`services.retrieval.caller_roles` says which RPC is which): a stolen orchestrator certificate,
    the component that faces the users and the LLM, cannot rewrite or delete the index, and a stolen
    ingest certificate, the component that parses uploaded files, cannot read every tenant's chunks."""

    allowed_callers: list[str] = Field(
        default=["orchestrator", "ingest"],
        min_length=1,
        description="With mTLS: the client certificate CNs (the component name from `rampart certs dev`, e.g. "
        "orchestrator; the chart: release-component, e.g. rampart-orchestrator) that may call "
        'retrieval, others get PERMISSION_DENIED; ["*"]: any certificate of the CA, and no check by '
        "method either",
    )
    read_callers: list[str] = Field(
        default=["orchestrator"],
        min_length=1,
        description="With mTLS: which of allowed_callers may call the search path's RPCs, those that return "
        "text, vectors or hits (Search, Bm25, Dense, Cosine, StoredVectors, CopyCosines, Chunks, "
        'Named); ["*"]: all of allowed_callers',
    )
    write_callers: list[str] = Field(
        default=["ingest"],
        min_length=1,
        description="With mTLS: which of allowed_callers may call the document lifecycle's RPCs (Write, "
        'Delete, Mark, and the Status and Current of ingest\'s bookkeeping); ["*"]: all of allowed_callers',
    )

    @field_validator("read_callers", "write_callers")
    @classmethod
    def _role_callers(cls, names: list[str], info: ValidationInfo) -> list[str]:
        return caller_names(str(info.field_name), names)

    @model_validator(mode="after")
    def _roles_within_allowed(self) -> RetrievalServiceSettings:
        """A role naming a caller the service gate refuses would never apply: a typo, or a chart that
        renamed the callers (release-prefixed CNs) in one list only."""
        if ANY_CALLER in self.allowed_callers:
            return self
        for field in ("read_callers", "write_callers"):
            outside = [n for n in getattr(self, field) if n != ANY_CALLER and n not in self.allowed_callers]
            if outside:
                raise ValueError(
                    f"retrieval_service.{field} names {outside!r}, not in allowed_callers "
                    f"{self.allowed_callers!r}: the service refuses them before any method; add them to "
                    f"RAMPART_RETRIEVAL_SERVICE__ALLOWED_CALLERS or fix RAMPART_RETRIEVAL_SERVICE__{field.upper()}"
                )
        return self


class ServiceTlsSettings(BaseModel):
    """Mutual TLS between Rampart's gRPC services (``remote.tls``): every server presents
    ``cert_file`` and asks each client for a certificate signed by ``ca_file``; every client presents
    the same pair and checks the server's against ``ca_file``. Files, so a Kubernetes Secret mounts as
    is; ``rampart certs dev`` makes a local CA and certificates (docs/security.md)."""

    enabled: bool = Field(default=False, description="mTLS on every gRPC server and client of this process")
    ca_file: Path | None = Field(
        default=None, description="PEM CA certificate(s) that sign the services' certificates"
    )
    cert_file: Path | None = Field(
        default=None, description="PEM certificate chain this process serves with and presents as a client"
    )
    key_file: Path | None = Field(default=None, description="PEM private key of cert_file (mode 600)")
    server_name: str | None = Field(
        default=None,
        description="Name the servers' certificates are checked against, when it differs from the address "
        "(an IP list, a dns:/// target): a SAN of every service's certificate",
    )

    @model_validator(mode="after")
    def _files(self) -> ServiceTlsSettings:
        if self.enabled:
            missing = [n for n in ("ca_file", "cert_file", "key_file") if getattr(self, n) is None]
            if missing:
                names = ", ".join(f"RAMPART_REMOTE__TLS__{n.upper()}" for n in missing)
                raise ValueError(
                    f"remote.tls.enabled is true but {', '.join(missing)} unset; set {names} (PEM files; "
                    "`rampart certs dev --out DIR` makes a local set) or RAMPART_REMOTE__TLS__ENABLED=false"
                )
        return self


class RemoteSettings(BaseModel):
    """Where the distributed stages are: set an address and its callers use the gRPC service."""

    retrieval_address: str | None = Field(
        default=None,
        description="host:port of the retrieval service, or its replicas as a comma-separated list of IPv4 "
        "host:port or dns:///name:port (client-side round robin); unset: the index this process opens",
    )
    ingest_address: str | None = Field(
        default=None,
        description="host:port of the ingest service, or its workers as a comma-separated list of IPv4 "
        "host:port or dns:///name:port (client-side round robin); unset: ingest in-process",
    )
    deadline_ms: int = Field(
        default=5000, ge=10, le=600_000, description="Deadline of one RPC (a caller's own deadline wins)"
    )
    ingest_deadline_ms: int = Field(
        default=300_000, ge=100, le=3_600_000, description="Deadline of one ingest batch RPC"
    )
    retry_window_ms: int = Field(
        default=3000,
        ge=0,
        le=600_000,
        description="How long an idempotent RPC (reads, index writes at a version) retries UNAVAILABLE "
        "within its deadline: rides over a server restarting (~2.5 s under supervisord, a rescheduled "
        "pod) instead of failing those seconds' requests; a server that stays down costs each call this "
        "long; 0: three quick tries only",
    )
    orchestrator_url: str | None = Field(
        default=None,
        description="Base URL of the orchestrator's Serve HTTP ingress (e.g. http://127.0.0.1:8090); set: "
        "the gateway forwards search/answer there instead of running the pipeline in-process",
    )
    internal_token: SecretStr | None = Field(
        default=None,
        description="The deployment's shared secret: the gateway sends it to the orchestrator ingress and "
        "every gRPC client sends it to the services, which refuse calls without it (UNAUTHENTICATED); "
        "`rampart stack` makes one",
    )
    tls: ServiceTlsSettings = ServiceTlsSettings()
    orchestrator_timeout_s: float = Field(
        default=60.0, gt=0.0, le=3600.0, description="Longest the gateway waits for one orchestrator reply"
    )


class CorpusProfile(StrEnum):
    """What kind of corpus a tenant holds, which decides whether the features that follow document
    titles run (docs/corpus-profiles.md).

    ``generic``: documents that do not name each other by title (abstracts, manuals, tickets): the link
    features found nothing to gain there (Cranfield, MED, CISI) and cost quality on some. ``linked``:
    documents that name each other by title, as wiki pages do: the link stream, the two-hop lift, the
    fact-check's title rules, evidence pairs and the chain's title ordering are worth a lot there
    (2WikiMultihopQA-164 single-shot nDCG@10 0.937 with them, 0.790 without)."""

    GENERIC = "generic"
    LINKED = "linked"


_PROFILES = ", ".join(p.value for p in CorpusProfile)
_TENANT = re.compile(NAME_PATTERN)


def _profile(value: Any, where: str, fix: str) -> Any:
    """``value`` unchanged when it names a profile (pydantic converts it), else a ValueError naming the
    bad value, where it was set and the fix: pydantic's own enum error shows neither the variable nor
    the choices' meaning."""
    if isinstance(value, CorpusProfile) or (isinstance(value, str) and value in set(CorpusProfile)):
        return value
    raise ValueError(f"{where} = {value!r} is not a corpus profile; use one of {_PROFILES} ({fix})")


class CorpusSettings(BaseModel):
    """Each tenant's corpus profile: ``profile`` for every tenant, ``tenants`` overriding it by name.
    A profile belongs to the corpus, not to the request: the pipeline reads it from the principal's
    tenant on every search, so one deployment serves a wiki tenant and an abstracts tenant side by side."""

    profile: CorpusProfile = Field(
        default=CorpusProfile.GENERIC,
        description="Every tenant's corpus profile unless corpus.tenants names it: generic (link features "
        "off) or linked (documents name each other by title, e.g. a wiki: link stream, two-hop lift, the "
        "fact-check's title rules, evidence pairs, the chain's title ordering; docs/corpus-profiles.md)",
    )
    # NoDecode: the validator reads the variable's JSON itself, so a malformed value is named with its fix
    tenants: Annotated[dict[str, CorpusProfile], NoDecode] = Field(
        default_factory=dict,
        description='Per-tenant profiles overriding corpus.profile, as JSON: {"wiki": "linked"}',
    )

    @field_validator("profile", mode="before")
    @classmethod
    def _known_profile(cls, value: Any) -> Any:
        return _profile(value, "corpus.profile", "fix RAMPART_CORPUS__PROFILE")

    @field_validator("tenants", mode="before")
    @classmethod
    def _known_tenants(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}  # set but empty: no overrides
            except ValueError:
                raise ValueError(
                    f"corpus.tenants = {value!r} is not JSON; set RAMPART_CORPUS__TENANTS to a JSON object "
                    'such as {"wiki": "linked"}'
                ) from None
        if not isinstance(value, dict):
            raise ValueError(
                f"corpus.tenants must map tenant names to profiles, got {type(value).__name__}; set "
                'RAMPART_CORPUS__TENANTS to a JSON object such as {"wiki": "linked"}'
            )
        fix = 'fix RAMPART_CORPUS__TENANTS, e.g. {"wiki": "linked"}'
        for tenant, profile in value.items():
            if not isinstance(tenant, str) or not _TENANT.match(tenant):
                raise ValueError(f"corpus.tenants names {tenant!r}, which is no tenant name ({fix})")
            _profile(profile, f"corpus.tenants[{tenant!r}]", fix)
        return value

    def of(self, tenant: str) -> CorpusProfile:
        """The profile of ``tenant``'s corpus: its own entry in ``tenants``, else ``profile``."""
        return self.tenants.get(tenant, self.profile)

    def linked(self, tenant: str) -> bool:
        """Whether ``tenant``'s documents name each other by title (the link features run for it)."""
        return self.of(tenant) is CorpusProfile.LINKED

    def any_linked(self) -> bool:
        """Whether some tenant may be linked: what a component serving every tenant must be ready for
        (the orchestrator loads the evidence-pair model only then)."""
        return self.profile is CorpusProfile.LINKED or CorpusProfile.LINKED in self.tenants.values()

    def with_tenant(self, tenant: str, profile: CorpusProfile) -> CorpusSettings:
        """A copy with ``tenant``'s profile set (``rampart eval --profile`` sets the evaluation tenant's)."""
        return self.model_copy(update={"tenants": {**self.tenants, tenant: CorpusProfile(profile)}})
