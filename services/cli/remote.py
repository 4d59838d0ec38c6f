"""Talk to a running gateway (``--url``/``RAMPART_URL`` + ``--api-key``/``RAMPART_API_KEY``), so the CLI
works while ``rampart serve`` holds the embedded index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from services.common.errors import ErrorCode, RampartError
from services.common.types import Document
from services.ingest.service import IngestResult


class RemoteGateway:
    def __init__(self, url: str, api_key: str, *, timeout_s: float = 300.0) -> None:
        self._client = httpx.Client(
            base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s
        )

    def close(self) -> None:
        self._client.close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            resp = self._client.post(path, json=body)
        except httpx.TransportError as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"cannot reach {self._client.base_url}: {exc}; is `rampart serve` running?",
            ) from exc
        if resp.status_code >= 400:
            try:
                err = resp.json()
                raise RampartError(ErrorCode(err["code"]), err["message"], **err.get("details", {}))
            except (ValueError, KeyError):
                raise RampartError(
                    ErrorCode.INTERNAL, f"HTTP {resp.status_code}: {resp.text[:200]}"
                ) from None
        return resp.json()

    def ingest(self, docs: Sequence[Document]) -> list[IngestResult]:
        body = {"documents": [d.model_dump(mode="json", exclude_none=True) for d in docs]}
        return [IngestResult.model_validate(r) for r in self._post("/v1/documents", body)["results"]]

    def search(
        self, query: str, top_k: int, fusion: dict[str, Any] | None, tenant: str | None = None
    ) -> dict[str, Any]:
        """The whole search response; ``tenant`` is checked by the server against the key's (403)."""
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if fusion:
            body["fusion"] = fusion
        if tenant:
            body["tenant"] = tenant
        return dict(self._post("/v1/search", body))

    def answer(
        self, query: str, top_k: int, session_id: str | None, tenant: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if session_id:
            body["session_id"] = session_id
        if tenant:
            body["tenant"] = tenant
        return dict(self._post("/v1/answer", body))
