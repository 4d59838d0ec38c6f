"""Settings of the HTTP gateway: :class:`GatewaySettings` (``gateway``), read by the app (bind
address, request limits, rate limit, the API-key file); the ingest service reads
``max_document_bytes`` and the conversational rewrite ``max_query_chars``, the limits the gateway
enforces first.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class GatewaySettings(BaseModel):
    host: str = Field(default="127.0.0.1", description="Bind address (0.0.0.0 to expose)")
    port: int = Field(default=8080, ge=1, le=65535, description="HTTP port")
    api_keys_file: Path | None = Field(
        default=None, description="JSON file of hashed API keys; default <data_dir>/api-keys.json"
    )
    max_body_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, description="Largest request body")
    max_document_bytes: int = Field(default=5 * 1024 * 1024, ge=1, description="Largest single document")
    max_batch_documents: int = Field(default=256, ge=1, description="Documents per ingest request")
    max_top_k: int = Field(default=100, ge=1, le=1000, description="Largest top_k a search may ask")
    max_query_chars: int = Field(default=2000, ge=1, description="Longest query")
    rate_limit_per_minute: int = Field(default=600, ge=0, description="Per API key; 0 disables")
