"""The orchestrator as served (``build_orchestrator``) takes its sub-query proposer from
``build_proposer``: ``chain.use_llm`` decides, as it does in evaluation. No network: the LLM client
is built but never called."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from services.common.settings import RampartSettings
from services.orchestrator.assemble import build_orchestrator
from services.orchestrator.chain.subqueries import HeuristicProposer, LlmProposer
from services.orchestrator.orchestrator import Orchestrator
from services.orchestrator.search import SearchPipeline
from services.retrieval.hybrid import SearchOutcome, SearchParams

LLM = "http://127.0.0.1:9/v1"  # never called


class NoRetriever:
    def search(self, query: str, principal: object, params: SearchParams) -> SearchOutcome:
        raise AssertionError("not searched")

    def stats(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


class FixedEmbedder:
    model_id = "fixed"
    dim = 8

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return np.zeros((len(texts), self.dim), dtype=np.float32)


def orchestrator(tmp_path: Path, **sections: dict[str, object]) -> Orchestrator:
    settings = RampartSettings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "models_dir": tmp_path / "models",
            "routing": {"enabled": False},  # no router artifact needed
            "chain": {"pair_order": False, **sections.pop("chain", {})},
            **sections,
        }
    )
    return build_orchestrator(settings, SearchPipeline(NoRetriever(), settings.fusion), FixedEmbedder())


def test_chain_use_llm_false_keeps_the_heuristic_proposer(tmp_path: Path) -> None:
    orch = orchestrator(tmp_path, llm={"base_url": LLM}, chain={"use_llm": False})
    assert isinstance(orch.proposer, HeuristicProposer)
    orch.close()


def test_chain_use_llm_true_proposes_with_the_llm(tmp_path: Path) -> None:
    """Even when answers stay extractive: the chain's switch is its own."""
    orch = orchestrator(tmp_path, llm={"base_url": LLM}, chain={"use_llm": True}, answer={"use_llm": False})
    assert isinstance(orch.proposer, LlmProposer)
    orch.close()


def test_no_llm_endpoint_means_heuristics(tmp_path: Path) -> None:
    orch = orchestrator(tmp_path, chain={"use_llm": True})
    assert isinstance(orch.proposer, HeuristicProposer)
    orch.close()


def test_the_pair_model_is_loaded_only_when_some_tenant_is_linked(tmp_path: Path) -> None:
    """Evidence pairs serve the linked corpus profile only (orchestrator.pair_plan): with every tenant
    generic, the default, nothing reads the model, so none is loaded."""
    generic = orchestrator(tmp_path, chain={"pair_order": True})
    assert generic.pairs is None
    generic.close()
    one = orchestrator(tmp_path, chain={"pair_order": True}, corpus={"tenants": {"wiki": "linked"}})
    assert one.pairs is not None
    one.close()
    off = orchestrator(tmp_path, chain={"pair_order": False}, corpus={"profile": "linked"})
    assert off.pairs is None
    off.close()
