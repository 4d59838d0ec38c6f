"""CRAG's corrective search target: the enterprise stand-in for the paper's web search (papers.md §3).

Two kinds, chosen by ``grading.secondary.kind``:

- :class:`TenantSource` searches another tenant's corpus in the same index (e.g. a company-wide
  "public knowledge" tenant). **Who may read it:** only that tenant's documents shared with everyone
  (``acl.groups = ["*"]``). The search runs as a service principal whose *only* ACL token is
  ``g:*`` — not the caller's user or groups, which mean nothing in another tenant — so the index's own
  tenant + ACL filter (inside the query, never after it; docs/retrieval.md) excludes every document that is
  restricted to users or groups, and the caller's own tenant is never searched through this path.
- :class:`HttpSource` POSTs the query to a federated search endpoint and parses the reply strictly.
  Rampart cannot see that system's ACLs, so it forwards the caller's tenant, user and groups and the
  endpoint must filter by them (docs/grading.md).

Both raise :class:`RampartError` (``UNAVAILABLE``) on any failure; the corrective stage turns that into
``degraded: ["secondary"]`` and answers from the primary results.
"""

from __future__ import annotations

import logging
from typing import Protocol
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.http_retry import RetryableStatusError, raise_for_retryable, retryable
from services.common.types import EVERYONE, Chunk, Principal, ScoredChunk
from services.orchestrator.corrective.config import SecondarySourceSettings
from services.orchestrator.search import SearchPipeline

log = logging.getLogger(__name__)

SERVICE_USER = "rampart-secondary"


class SecondarySource(Protocol):
    """Where an Incorrect (or Ambiguous) retrieval looks next."""

    @property
    def name(self) -> str:
        """Short label for origins, spans and logs (never a credential)."""
        ...

    @property
    def vetted(self) -> bool:
        """Whether its results already went through Rampart's fact-check (else the stage runs it)."""
        ...

    def search(self, query: str, principal: Principal, top_k: int) -> list[ScoredChunk]:
        """Best ``top_k`` results for ``principal``; raises ``RampartError`` when the source fails."""
        ...

    def close(self) -> None: ...


class SharedOnlyPrincipal(Principal):
    """A service principal of one tenant that matches only documents shared with everyone there."""

    def acl_tokens(self) -> list[str]:
        return [f"g:{EVERYONE}"]


class TenantSource:
    """Another tenant's corpus in this index, restricted to its documents shared with everyone."""

    def __init__(self, pipeline: SearchPipeline, tenant: str) -> None:
        self.pipeline = pipeline
        self.tenant = tenant
        try:
            self.reader = SharedOnlyPrincipal(tenant=tenant, user=SERVICE_USER, groups=[], scopes=["search"])
        except ValidationError:
            raise invalid(
                f"grading.secondary.tenant {tenant!r} is not a tenant name (letters, digits, . _ @ -); "
                "fix RAMPART_GRADING__SECONDARY__TENANT"
            ) from None

    @property
    def name(self) -> str:
        return f"tenant:{self.tenant}"

    @property
    def vetted(self) -> bool:
        return True  # searched through the pipeline: reranked and fact-checked like any search

    def search(self, query: str, principal: Principal, top_k: int) -> list[ScoredChunk]:
        if principal.tenant == self.tenant:
            return []  # the primary search already read this tenant with the caller's own rights
        outcome = self.pipeline.search(query, self.reader, self.pipeline.params(top_k=top_k))
        return outcome.hits

    def close(self) -> None:
        return None


class _Result(BaseModel):
    """One result of the federated endpoint; extra fields are ignored, the typed ones are required."""

    model_config = ConfigDict(extra="ignore", strict=True)

    id: str = Field(min_length=1, max_length=255)
    text: str = Field(min_length=1)
    title: str = Field(default="", max_length=1024)
    score: float | None = None
    source: str = Field(default="", max_length=2048)


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    results: list[_Result] = Field(max_length=1000)


class HttpSource:
    """A federated search endpoint: ``POST url`` with ``{"query", "top_k", "principal"}``, reply
    ``{"results": [{"id", "text", "title"?, "score"?, "source"?}]}``."""

    def __init__(self, settings: SecondarySourceSettings) -> None:
        if not settings.url:
            raise invalid("grading.secondary.kind=http needs a url; set RAMPART_GRADING__SECONDARY__URL")
        parts = urlsplit(settings.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.password:
            raise invalid(
                "grading.secondary.url must be an http(s) URL without credentials, e.g. "
                "http://search.internal:9000/search; put the token in RAMPART_GRADING__SECONDARY__API_KEY"
            )
        self.settings = settings
        self.url = settings.url
        self._name = f"http:{parts.hostname}{f':{parts.port}' if parts.port else ''}"
        headers = {"Content-Type": "application/json"}
        if settings.api_key is not None:
            headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._timeout_s = settings.timeout_ms / 1000
        self._client = httpx.Client(timeout=httpx.Timeout(self._timeout_s), headers=headers)

    @property
    def name(self) -> str:
        return self._name

    @property
    def vetted(self) -> bool:
        return False  # outside content: the corrective stage fact-checks it

    def search(self, query: str, principal: Principal, top_k: int) -> list[ScoredChunk]:
        body = {
            "query": query,
            "top_k": top_k,
            "principal": {"tenant": principal.tenant, "user": principal.user, "groups": principal.groups},
        }
        try:
            response = self._post(body)
        except Exception as exc:
            raise self._unavailable(exc) from None
        try:
            reply = _Reply.model_validate_json(response.content)
        except ValidationError as exc:
            log.warning(
                "secondary source %s sent a malformed reply (%d errors)", self.name, exc.error_count()
            )
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"secondary source {self.name} sent a reply that is not "
                '{"results": [{"id", "text", ...}]}; fix the endpoint',
            ) from None
        return [self._hit(r) for r in reply.results[:top_k]]

    def close(self) -> None:
        self._client.close()

    def _post(self, body: dict[str, object]) -> httpx.Response:
        for attempt in Retrying(
            stop=stop_after_attempt(self.settings.retries + 1) | stop_after_delay(self._timeout_s),
            wait=wait_exponential(multiplier=0.05, max=0.5),
            retry=retry_if_exception(retryable),
            reraise=True,
        ):
            with attempt:
                response = self._client.post(self.url, json=body)
                raise_for_retryable(response)  # 5xx and 429 retried, other 4xx not
                return response
        raise AssertionError("unreachable")  # pragma: no cover  (Retrying returns or raises)

    def _hit(self, r: _Result) -> ScoredChunk:
        score = r.score if r.score is not None else 0.0
        chunk = Chunk(
            chunk_id=f"{self.name}/{r.id}",
            doc_id=r.id,
            tenant=self.name,  # marks the origin: not a tenant of this index
            ordinal=0,
            title=r.title,
            text=r.text[: self.settings.max_text_chars],
            source=r.source or self.url,
            trust="untrusted",  # outside content: the fact-check reads it with stricter thresholds
        )
        return ScoredChunk(chunk=chunk, scores={"secondary": score}, ranks={}, fused=score)

    def _unavailable(self, exc: Exception) -> RampartError:
        if isinstance(exc, httpx.TimeoutException):
            why = f"no answer within {self.settings.timeout_ms} ms"
        elif isinstance(exc, RetryableStatusError):
            why = f"HTTP {exc.status}"
        elif isinstance(exc, httpx.HTTPStatusError):
            why = f"HTTP {exc.response.status_code}"
        else:
            why = f"unreachable ({type(exc).__name__})"
        log.warning("secondary source %s: %s; primary results only", self.name, why)  # no token, no query
        return RampartError(ErrorCode.UNAVAILABLE, f"secondary source {self.name}: {why}")


def build_secondary(settings: SecondarySourceSettings, pipeline: SearchPipeline) -> SecondarySource | None:
    """The configured source, or ``None`` for ``kind=none``."""
    if settings.kind == "none":
        return None
    if settings.kind == "tenant":
        if not settings.tenant:
            raise invalid(
                "grading.secondary.kind=tenant needs the tenant to search; set RAMPART_GRADING__SECONDARY__TENANT"
            )
        return TenantSource(pipeline, settings.tenant)
    return HttpSource(settings)
