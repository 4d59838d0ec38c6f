"""Settings of the orchestrator's answer step, read where the parts are assembled
(:mod:`services.orchestrator.assemble`): :class:`AnswerSettings` (``answer``).

Each part keeps its own settings next to it: ``routing/config.py``, ``conversation/config.py``,
``chain/config.py``, ``corrective/config.py`` and ``serving/config.py``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class AnswerSettings(BaseModel):
    """``POST /v1/answer``: extractive by default, an LLM when ``llm.base_url`` is set."""

    use_llm: bool = Field(default=True, description="Generate with the LLM at llm.base_url when one is set")
    max_sentences: int = Field(default=3, ge=1, le=20, description="Sentences in an extractive answer")
    max_context_chars: int = Field(
        default=6000, ge=200, le=100_000, description="Verified context handed to the LLM, at most"
    )
