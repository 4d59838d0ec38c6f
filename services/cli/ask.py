"""``rampart ask QUESTION``: an answer with citations, through the adaptive pipeline (local or --url)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from services.cli.ui import fail, load_settings, out, print_error, server_hint, split_csv
from services.common.errors import RampartError
from services.common.types import Principal


def ask(
    question: Annotated[str, typer.Argument(help="The question")],
    tenant: Annotated[
        str,
        typer.Option(help="Ask as a principal of this tenant (with --url: must be the key's, else refused)"),
    ] = "",
    user: Annotated[str, typer.Option(help="Ask as this user")] = "cli",
    groups: Annotated[str, typer.Option(help="The principal's groups, comma-separated")] = "",
    session: Annotated[
        str | None, typer.Option(help="Session id printed by the previous `ask --url` (follow-up questions)")
    ] = None,
    top_k: Annotated[int, typer.Option(min=1, max=100, help="Results shown under the answer")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole response as JSON")] = False,
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="RAMPART_URL", help="Use a running gateway instead of the local index"),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="RAMPART_API_KEY", help="API key for --url")
    ] = None,
) -> None:
    """Answer a question from the documents the principal may read, citing them."""
    try:
        body = (
            _remote(question, tenant, top_k, session, url, api_key)
            if url
            else _local(question, tenant, user, groups, top_k)
        )
    except ValueError as exc:
        print_error(f"{exc}")
        raise typer.Exit(code=2) from exc
    except RampartError as exc:
        raise fail(server_hint(exc, load_settings())) from exc
    if as_json:
        out.print_json(json.dumps(body))
        return
    a = body["adaptive"]
    if body.get("caution"):
        out.print(f"[yellow]caution[/yellow]: {escape(body['caution'])}")
    # documents' own text: escaped, their brackets are not markup
    out.print(
        escape(body["answer"]) or "[yellow]no answer[/yellow]: nothing this principal may read answers it"
    )
    for c in body["citations"]:
        out.print(escape(f"  [{c['n']}] {c['title'] or c['doc_id']} ({c['doc_id']})"))
    grade = f", grade {a['grade']['grade']}" if a.get("grade") else ""
    out.print(
        f"[dim]{body['method']} · route {a['route']['type']}/{a['route']['complexity']}{grade} · "
        f"{a['retrieval_calls']} retrieval call(s){' · degraded: ' + ','.join(body['degraded']) if body['degraded'] else ''}"
        f"{' · session ' + a['session_id'] if a.get('session_id') and url else ''}[/dim]"
    )


def _remote(
    question: str, tenant: str, top_k: int, session: str | None, url: str, api_key: str | None
) -> dict[str, Any]:
    """Through the server: the key decides the principal; a ``--tenant`` of another tenant is refused."""
    from services.cli.remote import RemoteGateway

    if not api_key:
        raise ValueError("--url needs --api-key (or RAMPART_API_KEY); the key decides the principal")
    remote = RemoteGateway(url, api_key)
    try:
        return remote.answer(question, top_k, session, tenant or None)
    finally:
        remote.close()


def _local(question: str, tenant: str, user: str, groups: str, top_k: int) -> dict[str, Any]:
    from services.orchestrator.orchestrator import Ask
    from services.orchestrator.runtime import Runtime
    from services.orchestrator.serving.responses import to_adaptive, to_citations, to_hits

    if not tenant:
        raise ValueError("--tenant is required when asking the local index (or use --url with an API key)")
    who = Principal(tenant=tenant, user=user, groups=split_csv(groups), scopes=["search"])
    runtime = Runtime.open(load_settings())
    try:
        done = runtime.orchestrator.run(Ask(query=question, top_k=top_k, answer=True), who)
    finally:
        runtime.close()
    a = done.answer
    return {
        "query": question,
        "answer": a.shown() if a else "",
        "method": a.method if a else "none",
        "caution": a.caution if a else None,
        "citations": [c.model_dump() for c in to_citations(a)] if a else [],
        "results": [h.model_dump(mode="json") for h in to_hits(done.outcome.hits[:top_k])],
        "adaptive": to_adaptive(done).model_dump(mode="json"),
        "degraded": done.outcome.degraded,
        "factcheck_fallback": done.outcome.fallback,
    }
