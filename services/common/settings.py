"""Settings, read once at start-up from ``RAMPART_*`` environment variables (nested with ``__``).

Example: ``RAMPART_INDEX__BM25_K1=0.9`` or ``RAMPART_FUSION__METHOD=rrf``. Build one
:class:`RampartSettings` in the entry point and pass it down; nothing reads the environment at import.

Each stage owns its settings in its own ``config.py`` (``services/<stage>/config.py``; the
orchestrator's parts in ``services/orchestrator/<part>/config.py``; what several stages share in
:mod:`services.common.config`). This module only composes them: one field per group, whose name is
the variable's prefix (``RAMPART_<GROUP>__<FIELD>``). Stage factories take their group, not this.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.config import CorpusSettings, LlmSettings, RemoteSettings, RetrievalServiceSettings
from services.common.settings_env import environment_problem
from services.factcheck.config import FactCheckSettings
from services.gateway.config import GatewaySettings
from services.ingest.config import ChunkingSettings, IngestServiceSettings, ParsingSettings
from services.learning.config import FeedbackSettings
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.config import AnswerSettings
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.corrective.config import GradingSettings
from services.orchestrator.routing.config import RoutingSettings
from services.orchestrator.serving.config import ServeSettings
from services.rerank.config import RerankSettings
from services.retrieval.config import EmbeddingSettings, FusionSettings, IndexSettings, OpenSearchSettings
from services.retrieval.graph.config import GraphSettings
from services.stack.config import StackSettings


class RampartSettings(BaseSettings):
    """Everything configurable; see ``docs/configuration.md`` for each field."""

    model_config = SettingsConfigDict(env_prefix="RAMPART_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(default=Path(".rampart/data"), description="Index, status DB, API keys")
    models_dir: Path = Field(default=Path(".rampart/models"), description="Built ONNX models")
    eval_data_dir: Path = Field(
        default=Path("../shared/data"),
        description="Benchmark data (read-only); `rampart eval NAME` looks for NAME here",
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR")
    log_format: Literal["json", "console"] = Field(default="console", description="json for log shippers")
    trace_content: bool = Field(
        default=False, description="Put query and passage text on trace spans (off: counts and ids only)"
    )
    key_pepper: SecretStr | None = Field(
        default=None, description="Optional secret mixed into API-key hashes (HMAC-SHA256)"
    )

    corpus: CorpusSettings = CorpusSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    parsing: ParsingSettings = ParsingSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    index: IndexSettings = IndexSettings()
    opensearch: OpenSearchSettings = OpenSearchSettings()
    fusion: FusionSettings = FusionSettings()
    graph: GraphSettings = GraphSettings()
    rerank: RerankSettings = RerankSettings()
    factcheck: FactCheckSettings = FactCheckSettings()
    gateway: GatewaySettings = GatewaySettings()
    feedback: FeedbackSettings = FeedbackSettings()
    llm: LlmSettings = LlmSettings()
    routing: RoutingSettings = RoutingSettings()
    chain: ChainSettings = ChainSettings()
    grading: GradingSettings = GradingSettings()
    sessions: SessionSettings = SessionSettings()
    answer: AnswerSettings = AnswerSettings()
    serve: ServeSettings = ServeSettings()
    retrieval_service: RetrievalServiceSettings = RetrievalServiceSettings()
    ingest_service: IngestServiceSettings = IngestServiceSettings()
    remote: RemoteSettings = RemoteSettings()
    stack: StackSettings = StackSettings()

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_variables(cls, data: Any) -> Any:
        """A misspelt or renamed ``RAMPART_<GROUP>__<FIELD>`` would otherwise be dropped in silence and
        the default run while the operator believes it changed (services/common/settings_env.py)."""
        problem = environment_problem(cls, os.environ)
        if problem is not None:
            raise ValueError(problem)
        return data

    def embedding_model_dir(self) -> Path:
        return self.embedding.resolve_model_dir(self.models_dir)

    def reranker_model_dir(self) -> Path:
        return self.rerank.resolve_model_dir(self.models_dir)

    def contradiction_model_dir(self) -> Path:
        return self.factcheck.resolve_contradiction_model_dir(self.models_dir)

    def router_model_dir(self) -> Path:
        return self.routing.resolve_model_dir(self.models_dir)

    def stack_dir(self) -> Path:
        return self.stack.dir or self.data_dir / "stack"

    def ingest_journal_dir(self) -> Path:
        return self.ingest_service.journal_dir or self.data_dir / "ingest-journal"

    def api_keys_path(self) -> Path:
        return self.gateway.api_keys_file or self.data_dir / "api-keys.json"
