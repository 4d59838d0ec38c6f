"""BM25 over tantivy, with the tenant + ACL filter inside the query.

Tantivy's scorer is Lucene's BM25 with k1 = 1.2 and b = 0.75 fixed in the engine. Other values are
honoured exactly: tantivy proposes candidates (``rescore_depth`` per result, ACL-filtered) and we
rescore them with the configured k1/b from the same statistics (document frequencies from tantivy,
analysed lengths from the store). See docs/retrieval.md.
"""

from __future__ import annotations

import math
import shutil
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tantivy

TANTIVY_K1 = 1.2
TANTIVY_B = 0.75
ANALYZER = "rampart_en"


def build_analyzer() -> tantivy.TextAnalyzer:
    """English analysis: split on non-alphanumerics, lowercase, drop stop words, Snowball stem."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("cid", stored=True, indexed=True, fast=True)
    sb.add_text_field("doc_key", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("tenant", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("acl", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("body", stored=False, tokenizer_name=ANALYZER, index_option="freq")
    return sb.build()


def doc_key(tenant: str, doc_id: str) -> str:
    return f"{tenant}\x1f{doc_id}"


@dataclass(frozen=True)
class Bm25Doc:
    cid: int
    tenant: str
    doc_id: str
    acl_tokens: Sequence[str]
    text: str


class TantivyBm25Index:
    """One tantivy index on disk; one writer for the process (tantivy's own lock enforces it)."""

    def __init__(self, path: Path, *, heap_mb: int = 128) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._schema = _schema()
        self._index = tantivy.Index(self._schema, path=str(path), reuse=True)
        self._analyzer = build_analyzer()
        self._index.register_tokenizer(ANALYZER, build_analyzer())
        self._writer = self._index.writer(heap_size=heap_mb * 1024 * 1024, num_threads=1)
        self._lock = threading.Lock()
        self._index.reload()

    @classmethod
    def recreate(cls, path: Path, *, heap_mb: int = 128) -> TantivyBm25Index:
        if path.exists():
            shutil.rmtree(path)
        return cls(path, heap_mb=heap_mb)

    def close(self) -> None:
        with self._lock:
            self._writer.wait_merging_threads()

    def analyze(self, text: str) -> list[str]:
        return list(self._analyzer.analyze(text))

    # ---- writes (call commit() once per batch) ----------------------------------------------------
    def add(self, docs: Iterable[Bm25Doc]) -> None:
        with self._lock:
            for d in docs:
                doc = tantivy.Document()
                doc.add_integer("cid", d.cid)
                doc.add_text("doc_key", doc_key(d.tenant, d.doc_id))
                doc.add_text("tenant", d.tenant)
                for tok in d.acl_tokens:
                    doc.add_text("acl", tok)
                doc.add_text("body", d.text)
                self._writer.add_document(doc)

    def delete_document(self, tenant: str, doc_id: str) -> None:
        with self._lock:
            self._writer.delete_documents_by_term("doc_key", doc_key(tenant, doc_id))

    def commit(self) -> None:
        with self._lock:
            self._writer.commit()
            self._index.reload()

    # ---- reads ----------------------------------------------------------------------------------------
    def num_docs(self) -> int:
        return int(self._index.searcher().num_docs)

    def all_cids(self) -> set[int]:
        searcher = self._index.searcher()
        n = searcher.num_docs
        if n == 0:
            return set()
        hits = searcher.search(tantivy.Query.all_query(), limit=n, count=False).hits
        return {int(v or 0) for v in searcher.fast_field_values("cid", [addr for _, addr in hits])}

    def _filter(self, tenant: str, acl_tokens: Sequence[str]) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        # Filters score 0 so the hit score is the text's BM25 alone.
        acl_q = tantivy.Query.term_set_query(self._schema, "acl", list(acl_tokens))
        tenant_q = tantivy.Query.term_query(self._schema, "tenant", tenant)
        return [
            (tantivy.Occur.Must, tantivy.Query.const_score_query(tenant_q, 0.0)),
            (tantivy.Occur.Must, tantivy.Query.const_score_query(acl_q, 0.0)),
        ]

    def search(
        self,
        query: str,
        *,
        tenant: str,
        acl_tokens: Sequence[str],
        limit: int,
        restrict_cids: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:
        """Top ``limit`` ``(cid, tantivy BM25 score)`` readable by the principal.

        ``restrict_cids`` scores only those chunks (used to fill in scores for dense-only candidates).
        """
        terms = Counter(self.analyze(query))
        if not terms or limit <= 0:
            return []
        should = [
            (
                tantivy.Occur.Should,
                tantivy.Query.boost_query(
                    tantivy.Query.term_query(self._schema, "body", term, index_option="freq"), float(n)
                )
                if n > 1
                else tantivy.Query.term_query(self._schema, "body", term, index_option="freq"),
            )
            for term, n in terms.items()
        ]
        clauses = [
            (tantivy.Occur.Must, tantivy.Query.boolean_query(should)),
            *self._filter(tenant, acl_tokens),
        ]
        if restrict_cids is not None:
            if not restrict_cids:
                return []
            only = tantivy.Query.term_set_query(self._schema, "cid", list(restrict_cids))
            clauses.append((tantivy.Occur.Must, tantivy.Query.const_score_query(only, 0.0)))
        searcher = self._index.searcher()
        hits = searcher.search(tantivy.Query.boolean_query(clauses), limit=limit, count=False).hits
        if not hits:
            return []
        cids = searcher.fast_field_values("cid", [addr for _, addr in hits])
        return [(int(c or 0), float(s)) for (s, _), c in zip(hits, cids, strict=True)]

    def doc_freqs(self, terms: Iterable[str], tenant: str | None = None) -> dict[str, int]:
        """Chunks holding each (analysed) term: in the whole index, or in ``tenant``'s chunks only
        (BM25 per tenant: one tenant's words must not move another's scores)."""
        searcher = self._index.searcher()
        if tenant is None:
            return {t: int(searcher.doc_freq("body", t)) for t in terms}
        tenant_q = tantivy.Query.term_query(self._schema, "tenant", tenant)
        out: dict[str, int] = {}
        for t in terms:
            both = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, "body", t)),
                    (tantivy.Occur.Must, tenant_q),
                ]
            )
            found = searcher.search(both, limit=1, count=True)
            out[t] = int(found.count)  # type: ignore[attr-defined]  # the stub lacks count (set with count=True)
        return out


def bm25_scores(
    query_terms: Sequence[str],
    docs: Sequence[tuple[int, Sequence[str], int]],
    *,
    doc_freqs: dict[str, int],
    num_docs: int,
    avg_len: float,
    k1: float,
    b: float,
) -> dict[int, float]:
    """Lucene BM25 (the formula tantivy uses) for ``(cid, analysed tokens, length)`` candidates."""
    qtf = Counter(query_terms)
    out: dict[int, float] = {}
    avg = avg_len or 1.0
    for cid, tokens, length in docs:
        tf = Counter(t for t in tokens if t in qtf)
        score = 0.0
        norm = k1 * (1.0 - b + b * length / avg)
        for term, n_q in qtf.items():
            f = tf.get(term, 0)
            if not f:
                continue
            df = doc_freqs.get(term, 0)
            idf = math.log(1.0 + (num_docs - df + 0.5) / (df + 0.5))
            score += n_q * idf * f * (k1 + 1.0) / (f + norm)
        out[cid] = score
    return out
