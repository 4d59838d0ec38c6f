"""The LLM rewrite of follow-ups against a scripted OpenAI-compatible server on loopback: a usable
reply is taken, anything else falls back to the rules, and the history travels fenced as data."""

from __future__ import annotations

import difflib

import pytest

from services.common.config import LlmSettings
from services.common.llm_client import ChatClient
from services.common.net import free_port
from services.orchestrator.conversation.entities import mentions
from services.orchestrator.conversation.fact_graph import FactGraph
from services.orchestrator.conversation.rewrite import ConversationalRewriter
from tests.integration.scripted_llm import Scripted, chat

HISTORY = ["Who wrote Dune?"]


def graph() -> FactGraph:
    g = FactGraph()
    g.update(mentions(HISTORY[0]), ["Frank Herbert"])
    return g


def rewriter(base_url: str) -> ConversationalRewriter:
    client = ChatClient(LlmSettings(base_url=base_url, timeout_s=3.0, retries=0))
    sim = lambda q, names: [difflib.SequenceMatcher(None, q, n).ratio() for n in names]  # noqa: E731
    return ConversationalRewriter(sim, llm=client, max_chars=200)


@pytest.mark.parametrize(
    ("reply", "method", "query"),
    [
        ('Sure: {"query": "When was Frank Herbert born?"}', "llm", "When was Frank Herbert born?"),
        ("When was Frank Herbert born?", "rules", "When was Frank Herbert born?"),  # not JSON: rules
        ('{"query": ""}', "rules", "When was Frank Herbert born?"),
        ('{"query": "' + "x" * 500 + '"}', "rules", "When was Frank Herbert born?"),  # too long
    ],
)
def test_llm_reply_is_used_only_when_valid(reply: str, method: str, query: str) -> None:
    with Scripted(lambda n: (200, chat(reply))) as server:
        got = rewriter(server.base_url).rewrite("When was he born?", HISTORY, graph())
        sent = server.requests[0]["body"]["messages"][1]["content"]
    assert (got.method, got.query) == (method, query)
    assert "<<<CONVERSATION" in sent and "Q1: Who wrote Dune?" in sent and "LAST: When was he born?" in sent


def test_server_down_falls_back_to_rules() -> None:
    got = rewriter(f"http://127.0.0.1:{free_port()}/v1").rewrite("When was he born?", HISTORY, graph())
    assert (got.method, got.query) == ("rules", "When was Frank Herbert born?")
