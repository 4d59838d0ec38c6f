"""Domain types shared by every stage: documents, principals, chunks and search hits.

Kept as pydantic models so the same definitions validate HTTP input, travel between services and
document the API. Anything a stage adds later (verdicts, grades) extends these, never copies them.
"""

from __future__ import annotations

import base64
import binascii
import re
from enum import StrEnum
from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from services.common.verdicts import Judgement

# Identifiers appear in index terms, file names and URLs: keep them boring.
IDENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/\-]{0,254}$"
Ident = Annotated[str, StringConstraints(pattern=IDENT_PATTERN)]
NAME_PATTERN = r"^[A-Za-z0-9*][A-Za-z0-9._@\-]{0,127}$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]

METADATA_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$"
"""A metadata key: a simple name (it becomes an index field name)."""
NOT_BLANK_PATTERN = r"[^\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
"""Some text that is not whitespace: a character outside exactly the set ``str.strip`` removes (Python's
``str.isspace``, tests/unit/test_api_schema_rules.py checks every code point). Spelled out rather than
``\\S``, which Python, ECMA-262 and JSON Schema tools each read differently."""
_NOT_BLANK = re.compile(NOT_BLANK_PATTERN)
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._\-]{8,64}$"
"""A request id as the gateway gives one (``x-request-id``, each response's ``request_id``): the
caller's own if it matches, else a fresh one."""
SESSION_ID_PATTERN = r"^s_[A-Za-z0-9_\-]{16,64}$"
"""A conversation session id as the server mints it (``s_`` + URL-safe random)."""


def session_id_problem(session_id: str) -> str | None:
    """Why ``session_id`` cannot be one the server minted (:data:`SESSION_ID_PATTERN`), else ``None``:
    the request model and the session stores refuse with this message."""
    if re.fullmatch(SESSION_ID_PATTERN, session_id):
        return None
    return (
        f"session_id {session_id[:80]!r} is not a session id; send the session_id a previous response "
        "returned, or omit it to start a new session"
    )


MAX_VERSION = 9 * 10**18
"""The largest document version: versions are int64 on the gRPC wire and in the stores' INTEGER
columns (at most 2**63 - 1, about 9.22e18). A round bound, because the OpenAPI document carries bounds
as doubles: 9e18 is one exactly, and its shortest spelling means the same integer to every reader."""


def _whole_number(value: object) -> object:
    """A JSON number without a fraction as the ``int`` it is: JSON Schema counts ``3.0`` as the integer
    3 (and clients generated from the OpenAPI document may send it), so refusing it would refuse a
    request the schema admits. Booleans, strings and ``3.5`` reach the strict ``int`` check unchanged
    and stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WHOLE_NUMBER = BeforeValidator(_whole_number)
WholeInt = Annotated[int, WHOLE_NUMBER]
"""An integer field of the wire types: declare it with ``Field(strict=True)`` (no booleans, no
strings); a whole float is the integer it spells. An optional one is ``Annotated[int,
Field(strict=True, ge=.., le=..), WHOLE_NUMBER] | None``: bounds given outside the union would be
written into the schema as pydantic's own ``ge``/``le`` instead of ``minimum``/``maximum``."""
METADATA_KEYS: JsonDict = {"propertyNames": {"pattern": METADATA_KEY_PATTERN}}
"""The schema's statement of ``Document._metadata_keys``, for every model that carries metadata."""

DEFAULT_TOP_K = 10
"""Results of a search or an answer that does not say how many (``top_k`` omitted)."""

EVERYONE = "*"
"""Group every principal of a tenant belongs to: ``acl.groups = ["*"]`` shares with the whole tenant."""

MetadataValue = str | int | float | bool


class Strict(BaseModel):
    """Base for wire types: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=False)


class Acl(Strict):
    """Who may read a document. A reader needs their user id in ``users`` or a group in ``groups``.

    The schema says "at least one reader" itself (``anyOf``), so a client generated from the OpenAPI
    document cannot build an ACL the server then refuses."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["users"], "properties": {"users": {"minItems": 1}}},
                {"required": ["groups"], "properties": {"groups": {"minItems": 1}}},
            ]
        }
    )

    users: list[Name] = Field(default_factory=list, max_length=1000)
    groups: list[Name] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _not_empty(self) -> Acl:
        if not self.users and not self.groups:
            raise ValueError(
                "acl is empty, so nobody could ever read this document; "
                'list readers in acl.users / acl.groups, or use acl.groups = ["*"] for the whole tenant'
            )
        return self

    def tokens(self) -> list[str]:
        """Index terms for this ACL (``u:<user>``, ``g:<group>``)."""
        return sorted({f"u:{u}" for u in self.users} | {f"g:{g}" for g in self.groups})


class Principal(Strict):
    """The authenticated caller: every search is evaluated as one."""

    tenant: Name
    user: Name
    groups: list[Name] = Field(default_factory=list)
    scopes: list[str] = Field(default_factory=lambda: ["search"])

    def acl_tokens(self) -> list[str]:
        """Index terms that grant this principal access: its user, its groups and ``*``."""
        return sorted({f"u:{self.user}", f"g:{EVERYONE}"} | {f"g:{g}" for g in self.groups})

    def can(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


class Document(Strict):
    """A source document as submitted. ``(id, version)`` makes ingest idempotent."""

    model_config = ConfigDict(
        # exactly one payload, as _one_payload checks: the other is absent or null
        json_schema_extra={
            "oneOf": [
                {"required": ["text"], "properties": {"text": {"type": "string"}}},
                {"required": ["content_base64"], "properties": {"content_base64": {"type": "string"}}},
            ]
        }
    )

    id: Ident
    version: WholeInt = Field(
        default=1, ge=0, le=MAX_VERSION, strict=True, description="Higher replaces lower; equal is a no-op."
    )
    tenant: Name
    acl: Acl
    source: str = Field(default="", max_length=2048, description="Where it came from (URL, path).")
    title: str = Field(default="", max_length=1024)
    text: Annotated[str, Field(json_schema_extra={"pattern": NOT_BLANK_PATTERN})] | None = Field(
        default=None,
        description="Inline content: plain text, or Markdown/HTML when content_type says so; not blank.",
    )
    content_base64: str | None = Field(
        default=None, description="Binary content (PDF, DOCX, or any text format), base64-encoded."
    )
    content_type: str | None = Field(
        default=None,
        description="text/plain, text/markdown, text/html, application/pdf or the DOCX type; "
        "guessed from source's extension or the content when omitted.",
    )
    metadata: dict[str, MetadataValue] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra=METADATA_KEYS,
    )

    @field_validator("text")
    @classmethod
    def _has_text(cls, v: str | None) -> str | None:
        if v is not None and not _NOT_BLANK.search(v):
            raise ValueError("text is blank; send the document's content, or delete the document instead")
        return v

    @model_validator(mode="after")
    def _one_payload(self) -> Document:
        if (self.text is None) == (self.content_base64 is None):
            raise ValueError("send exactly one of text (inline) or content_base64 (a file's bytes)")
        return self

    def payload(self) -> bytes | str:
        """The content to parse: ``str`` for inline text, ``bytes`` for a base64 file."""
        if self.text is not None:
            return self.text
        try:
            return base64.b64decode(self.content_base64 or "", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"content_base64 is not valid base64 ({exc}); encode the file's bytes") from exc

    @field_validator("metadata")
    @classmethod
    def _metadata_keys(cls, v: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        for key in v:
            if not re.fullmatch(METADATA_KEY_PATTERN, key):
                raise ValueError(f"metadata key {key!r} is not a simple name (letters, digits, _ . -)")
        return v


class Section(BaseModel):
    """A run of text under one heading path, as recovered by a parser."""

    path: list[str] = Field(default_factory=list)
    text: str


class ParsedDocument(BaseModel):
    """Parser output: plain text split into sections, with the title if the format carries one."""

    title: str = ""
    sections: list[Section]

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


class Chunk(BaseModel):
    """A retrievable unit: ``header`` + ``text`` is what both indexes see."""

    chunk_id: str
    doc_id: str
    tenant: str
    ordinal: int
    title: str = ""
    section_path: list[str] = Field(default_factory=list)
    header: str = ""
    text: str
    source: str = ""
    version: int = 1
    trust: str = Field(
        default="", description="The document's metadata 'trust' (e.g. untrusted), for fact-check"
    )

    @property
    def indexed_text(self) -> str:
        return f"{self.header}\n{self.text}" if self.header else self.text


class DocumentState(StrEnum):
    PENDING = "pending"
    INDEXED = "indexed"
    FAILED = "failed"
    DELETED = "deleted"


class DocumentStatus(BaseModel):
    id: str
    tenant: str
    version: int
    state: DocumentState
    chunks: int = 0
    error: str | None = None
    updated_at: float
    readers: list[str] = Field(
        default_factory=list,
        description="ACL tokens (u:<user>, g:<group>) of the stored version; empty: none recorded "
        "(never indexed). The gateway's write ACL reads them; the public API does not return them.",
    )


class Retriever(StrEnum):
    BM25 = "bm25"
    DENSE = "dense"
    GRAPH = "graph"  # the knowledge graph's walk (docs/graph.md): a third list, fused with the others


class FusionMethod(StrEnum):
    MINMAX = "minmax"
    ZSCORE = "zscore"
    RRF = "rrf"


class SearchFilters(Strict):
    """Restrictions applied inside both searches, on top of the tenant + ACL filter."""

    doc_ids: list[Ident] = Field(default_factory=list, max_length=1000)
    sources: list[str] = Field(default_factory=list, max_length=100)
    metadata: dict[str, MetadataValue] = Field(
        default_factory=dict, max_length=16, description="Exact-match on document metadata fields."
    )

    def is_empty(self) -> bool:
        return not (self.doc_ids or self.sources or self.metadata)


class CopyEdit(BaseModel):
    """How a result differs from an older near-copy that shares most of its words: the spans of that
    copy it replaced, word for word. A counterfactual attack plants a genuine passage with one claim
    swapped (a date, a name); a pasted copy replaces nothing, and a template sibling ("the 2014 season"
    beside "the 2015 season") replaces words of its heading. The fact-check decides which is which
    (docs/factcheck.md, "altered copies"); the search only reports the difference."""

    doc_id: str = Field(description="The older copy's document")
    replaced: list[tuple[str, str]] = Field(
        description="(the older copy's words, this result's words) for each replaced span, in text order"
    )
    heading: bool = Field(
        description="Whether a replaced word is in the title or section path of either chunk: another subject"
    )
    one_sided: list[str] = Field(
        default_factory=list,
        description="Words (case folded, sorted) that one of the two chunks has and the other lacks "
        "entirely: a query word among them tells two subjects apart",
    )


class ScoredChunk(BaseModel):
    """One fused result, with what each retriever thought of it."""

    chunk: Chunk
    scores: dict[str, float | None] = Field(
        description="Raw score per retriever (null: that retriever did not score it)."
    )
    ranks: dict[str, int | None] = Field(default_factory=dict)
    fused: float
    judgement: Judgement | None = Field(default=None, description="Fact-check verdict; null = not judged")
    vector: list[float] | None = Field(
        default=None, exclude=True, description="Stored embedding, when the search asked for it (internal)"
    )
    copy_cosines: list[float] | None = Field(
        default=None,
        exclude=True,
        description="Cosines between this chunk's claim vector (its text without the header) and the "
        "closest chunk of each other readable document, highest first, when the search asked for them "
        "(internal; null = not asked or no claim vector stored)",
    )
    copy_neighbors: list[list[float]] | None = Field(
        default=None,
        exclude=True,
        description="For the first len(copy_neighbors) entries of copy_cosines (those at or above the "
        "search's copy_expand): that other chunk's own copy cosines (internal; null = not asked)",
    )
    copy_leads: list[str] | None = Field(
        default=None,
        exclude=True,
        description="For the first len(copy_leads) entries of copy_cosines (those at or above the "
        "search's copy_leads): the name that other chunk opens with, '' if none (internal; null = not "
        "asked)",
    )
    arrival: int | None = Field(
        default=None,
        exclude=True,
        description="The chunk's place in its index's write order (larger = written later), when the "
        "search asked for copy cosines (internal; null = not asked or not known)",
    )
    copy_arrivals: list[int] | None = Field(
        default=None,
        exclude=True,
        description="Parallel to copy_cosines: the write order of each of those closest chunks "
        "(internal; null = not asked or not known)",
    )
    copy_overlaps: list[float] | None = Field(
        default=None,
        exclude=True,
        description="For the first len(copy_overlaps) entries of copy_cosines (those at or above the "
        "search's copy_overlap): the word overlap of that chunk's text with this one's (internal; null = "
        "not asked)",
    )
    copy_edits: list[CopyEdit] | None = Field(
        default=None,
        exclude=True,
        description="The older copies at or above the search's copy_overlap cosine that share most of this "
        "chunk's words, and what this chunk replaced of each (internal; null = not asked)",
    )
