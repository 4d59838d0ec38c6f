"""The ``rampart`` CLI as a user runs it: ingest the shipped samples, search as principals, eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opensearchpy import OpenSearch
from typer.testing import CliRunner

from services.cli.main import app
from services.retrieval.opensearch_node import OpenSearchNode
from tests.conftest import REPO, flat

# (tenant, user, groups, query, expected top document) from samples/README.md
ANSWERS = [
    ("acme", "dana", "", "How many weeks of parental leave does a primary caregiver get?", "leave-policy.md"),
    ("acme", "dana", "", "What is the maximum payload of the Acme R7?", "r7-technical-specification.pdf"),
    ("acme", "dana", "", "How long is the R7 warranty?", "r7-product-faq.html"),
    ("acme", "alice", "eng", "Who can downgrade a SEV1 incident?", "incident-response-runbook.md"),
    ("acme", "bob", "hr", "What is the salary range for a Staff Engineer (L5)?", "hr-salary-bands.md"),
    (
        "acme",
        "carol",
        "exec,finance",
        "What price are we paying for Lumen Vision?",
        "project-falcon-memo.docx",
    ),
    ("acme", "dana", "", "How much is my relocation allowance?", "relocation-agreement-dana.txt"),
    (
        "globex",
        "erin",
        "ops",
        "How long must a driver rest after 4.5 hours of driving?",
        "driver-policy.docx",
    ),
    ("globex", "frank", "finance", "What is the Gold tier rate per pallet?", "pricing-2025.md"),
]
RESTRICTED = {
    "hr-salary-bands.md": ("acme", "alice", "eng"),
    "project-falcon-memo.docx": ("acme", "bob", "hr"),
    "relocation-agreement-dana.txt": ("acme", "alice", "eng"),
    "pricing-2025.md": ("globex", "erin", "ops"),
}


def run(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def top_docs(env: dict[str, str], tenant: str, user: str, groups: str, query: str, k: int = 10) -> list[str]:
    out = run(
        env,
        "search",
        query,
        "--tenant",
        tenant,
        "--user",
        user,
        "--groups",
        groups,
        "--top-k",
        str(k),
        "--json",
    )
    return [h["doc_id"] for h in json.loads(out)["results"]]


def test_samples_answer_their_questions_and_respect_acls(env: dict[str, str]) -> None:
    for tenant in ("acme", "globex"):
        out = CliRunner().invoke(app, ["ingest", str(REPO / "samples" / tenant), "--tenant", tenant], env=env)
        assert out.exit_code == 0, out.output
        assert "0 failed" in out.output
    for tenant, user, groups, query, expected in ANSWERS:
        assert top_docs(env, tenant, user, groups, query, 3)[0] == expected, query
    for doc, (tenant, user, groups) in RESTRICTED.items():
        query = next(q for _, _, _, q, d in ANSWERS if d == doc)
        assert doc not in top_docs(env, tenant, user, groups, query, 50)
    # re-ingesting is idempotent
    again = CliRunner().invoke(
        app, ["ingest", str(REPO / "samples" / "globex"), "--tenant", "globex"], env=env
    )
    assert "7 unchanged" in again.output


def test_ingest_reports_failures_with_reasons(env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.md").write_text("# Title\n\nSome useful words about rockets.")
    (folder / "empty.txt").write_text("")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (folder / "bad-acl.md").write_text("hello world")
    (folder / "bad-acl.md.meta.json").write_text('{"acl": {"users": [], "groups": []}}')
    result = CliRunner().invoke(app, ["ingest", str(folder), "--tenant", "t"], env=env)
    assert result.exit_code == 1
    assert "1 indexed" in result.output and "4 failed" in result.output
    for name in ("empty.txt", "broken.pdf", "latin1.txt", "bad-acl.md"):
        assert name in result.output


def test_keys_lifecycle(env: dict[str, str]) -> None:
    key = run(env, "keys", "create", "--tenant", "acme", "--user", "zoe", "--groups", "eng").strip()
    assert key.startswith("rk_")
    listing = run(env, "keys", "list")
    assert "zoe" in listing and key not in listing
    stored = (Path(env["RAMPART_DATA_DIR"]) / "api-keys.json").read_text()
    assert key.split("_", 2)[2] not in stored  # only the hash is stored
    key_id = key.split("_")[1]
    assert "revoked" in run(env, "keys", "revoke", key_id)


def test_keys_expiry_and_rotation(env: dict[str, str]) -> None:
    """A key with an expiry, rotated: both work during the overlap; the old one records its successor."""
    from services.gateway.api_keys import ApiKeyStore

    old = run(env, "keys", "create", "--tenant", "acme", "--user", "ci", "--expires-days", "30").strip()
    old_id = old.split("_")[1]
    rotated = run(env, "keys", "rotate", old_id, "--overlap-hours", "1").strip().splitlines()
    new = rotated[-1]
    assert new.startswith("rk_") and new != old
    store = ApiKeyStore(Path(env["RAMPART_DATA_DIR"]) / "api-keys.json")
    assert store.authenticate(old)[0] == old_id and store.authenticate(new)[1].user == "ci"
    by_id = {k.id: k for k in store.list()}
    assert by_id[old_id].replaced_by == new.split("_")[1] and by_id[old_id].not_after is not None
    result = CliRunner().invoke(app, ["keys", "rotate", "nope"], env=env)
    assert result.exit_code != 0 and "no active key 'nope'" in " ".join(result.output.split())


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = {
        "d1": ("Aspirin", "Aspirin reduces the risk of heart attack in adults."),
        "d2": ("Statins", "Statins lower LDL cholesterol levels."),
        "d3": ("Vitamin D", "Vitamin D supplementation and bone density in the elderly."),
        "d4": ("Exercise", "Aerobic exercise improves cardiovascular fitness."),
    }
    with (root / "corpus.jsonl").open("w") as fh:
        for i, (t, x) in docs.items():
            fh.write(json.dumps({"_id": i, "title": t, "text": x}) + "\n")
    queries = {
        "q1": "does aspirin prevent heart attacks",
        "q2": "cholesterol lowering drugs",
        "q3": "bone density vitamin",
    }
    with (root / "queries.jsonl").open("w") as fh:
        for i, q in queries.items():
            fh.write(json.dumps({"_id": i, "text": q}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    return root


def test_eval_on_a_tiny_beir_set(env: dict[str, str], tmp_path: Path) -> None:
    data = write_beir(tmp_path / "beir")
    out_json = tmp_path / "report.json"
    run(
        env,
        "eval",
        str(data),
        "--pipelines",
        "bm25,dense,hybrid-minmax,hybrid-rrf:0.3,hybrid-minmax+rerank,hybrid-minmax+rerank-fused",
        "--json",
        str(out_json),
    )
    report = json.loads(out_json.read_text())
    first_stage = {"bm25", "dense", "hybrid-minmax", "hybrid-rrf:0.3"}
    assert set(report["pipelines"]) == first_stage | {"hybrid-minmax+rerank", "hybrid-minmax+rerank-fused"}
    for name, figures in report["pipelines"].items():
        # each query has one obvious answer; the reranker must not lose it either
        assert figures["ndcg@10"] == pytest.approx(1.0), name
        assert figures["latency_ms_p50"] > 0
    assert report["notes"]["rerank"]["model"].startswith("rampart-minilm-l6-ce")
    assert report["notes"]["corpus_profile"] == "generic"  # the default (docs/corpus-profiles.md)
    assert out_json.with_suffix(".png").stat().st_size > 1000
    # second run reuses the cached index
    run(env, "eval", str(data), "--pipelines", "bm25")
    caches = list((Path(env["RAMPART_DATA_DIR"]) / "eval-cache").iterdir())
    assert len(caches) == 1


def test_eval_routed_alone_reranks_as_served(env: dict[str, str], tmp_path: Path) -> None:
    """``routed`` on its own must load the reranker like the gateway does (it once ran without); under
    ``--profile linked`` (the evaluation tenant's), which the report records."""
    data = write_beir(tmp_path / "beir")
    out_json = tmp_path / "routed.json"
    run(
        env,
        "eval",
        str(data),
        "--pipelines",
        "routed,chain:1",
        "--profile",
        "linked",
        "--json",
        str(out_json),
    )
    report = json.loads(out_json.read_text())
    assert report["notes"]["rerank"]["model"].startswith("rampart-minilm-l6-ce")
    assert report["notes"]["corpus_profile"] == "linked"
    for name in ("routed", "chain:1"):
        figures = report["pipelines"][name]
        assert figures["all_supporting@2"] == pytest.approx(1.0), name
        assert figures["calls_per_query"] >= 1.0


def test_eval_rejects_bad_input(env: dict[str, str], tmp_path: Path) -> None:
    data = write_beir(tmp_path / "beir")
    for args, needle in [
        (["eval", str(tmp_path / "missing")], "corpus.jsonl"),
        (["eval", str(data), "--split", "dev"], "test"),
        (["eval", str(data), "--pipelines", "magic"], "unknown pipeline"),
        (["eval", str(data), "--profile", "wiki"], "'wiki' is not one of"),
    ]:
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == 2, result.output
        assert needle in result.output


def test_bench_prints_rates_and_stage_latencies(env: dict[str, str], tmp_path: Path) -> None:
    data = write_beir(tmp_path / "beir")
    out_json = tmp_path / "bench.json"
    run(env, "bench", "search", str(data), "--docs", "4", "--queries", "3", "--json", str(out_json))
    figures = json.loads(out_json.read_text())["figures"]
    assert figures["docs"] == 4 and figures["index_docs_per_s"] > 0
    for stage in ("embed", "bm25", "dense", "fuse", "total"):
        assert figures[f"search_{stage}_ms_p50"] > 0
    assert figures["embed_chunks"] == figures["chunks"] and figures["index_vs_embed"] > 0


def test_bench_rerank_compares_backends_including_a_real_triton(env: dict[str, str], tmp_path: Path) -> None:
    out_json = tmp_path / "bench-rerank.json"
    env = {**env, "RAMPART_RERANK__TRITON__VENV": str(REPO / ".venv-triton")}
    run(env, "bench", "rerank", "--batches", "1,4", "--tokens", "32", "--pairs", "4", "--json", str(out_json))
    record = json.loads(out_json.read_text())
    seen = {(r["backend"], r["batch"], r["concurrency"]) for r in record["rows"]}
    assert {("onnx-int8", 4, 16), ("triton", 4, 16), ("triton", 1, 1)} <= seen
    assert all(r["pairs_per_s"] > 0 and r["p95_ms"] >= r["p50_ms"] > 0 for r in record["rows"])
    assert {(r["batch"], r["concurrency"]) for r in record["ratios"]} == {(1, 1), (1, 16), (4, 1), (4, 16)}


def test_eval_and_bench_on_the_opensearch_backend(
    env: dict[str, str], tmp_path: Path, opensearch: OpenSearchNode
) -> None:
    """One switch: ``eval`` builds its cached index on the node under a prefix of that corpus and
    configuration (and reuses it), and ``bench`` indexes into a throw-away prefix it drops."""
    env = {**env, "RAMPART_INDEX__BACKEND": "opensearch", "RAMPART_OPENSEARCH__URL": opensearch.url}
    data = write_beir(tmp_path / "beir")
    out_json = tmp_path / "report.json"
    run(env, "eval", str(data), "--pipelines", "bm25,dense,hybrid-minmax", "--json", str(out_json))
    for name, figures in json.loads(out_json.read_text())["pipelines"].items():
        assert figures["ndcg@10"] == pytest.approx(1.0), name
    client = OpenSearch(hosts=[opensearch.url])
    try:
        made = sorted(client.indices.get_alias(name="eval-*"))
        assert len(made) == 3, made  # chunks, documents, meta of the one corpus
        run(env, "eval", str(data), "--pipelines", "bm25")  # the cached index again: nothing new
        assert sorted(client.indices.get_alias(name="eval-*")) == made
        bench_json = tmp_path / "bench.json"
        run(env, "bench", "search", str(data), "--docs", "4", "--queries", "3", "--json", str(bench_json))
        figures = json.loads(bench_json.read_text())["figures"]
        assert figures["index_docs_per_s"] > 0 and figures["embed_chunks_per_s"] > 0
        assert figures["index_vs_embed"] > 0 and figures["search_bm25_ms_p50"] > 0
        assert client.indices.get(index="bench-*") == {}  # the throw-away prefix is gone
        client.indices.delete(index="eval-*")
    finally:
        client.close()


def test_certs_dev_makes_a_ca_and_private_keys_and_refuses_to_replace_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    import stat

    from cryptography import x509

    out = tmp_path / "certs"
    made = run(
        env, "certs", "dev", "--out", str(out), "--names", "retrieval,gateway", "--hosts", "rampart.internal"
    )
    assert "retrieval" in made and "gateway" in made
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    for name in ("ca-key", "retrieval-key", "gateway-key"):
        assert stat.S_IMODE((out / f"{name}.pem").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((out / "retrieval.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"retrieval", "localhost", "rampart.internal"} <= set(sans.get_values_for_type(x509.DNSName))
    again = CliRunner().invoke(app, ["certs", "dev", "--out", str(out)], env=env)
    assert again.exit_code == 2 and "--force" in flat(again.output)
    assert CliRunner().invoke(app, ["certs", "dev", "--out", str(out), "--force"], env=env).exit_code == 0
