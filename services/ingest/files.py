"""Turn files on disk into :class:`Document` s (`rampart ingest`, the stack bench's folder corpus).

Each file may have a sidecar ``<name>.meta.json`` with ``title``, ``acl``, ``metadata``, ``id`` and
``version``; command-line options give the defaults (``--groups '*'``: the whole tenant).
The document id defaults to the path relative to the ingested root, so re-ingesting is idempotent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from services.common.types import Acl, Document
from services.ingest.parsing import SUPPORTED_TYPES, detect_content_type

SIDECAR = ".meta.json"
EXTENSIONS = {".txt", ".text", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx"}


@dataclass(frozen=True)
class FileDocument:
    path: Path
    document: Document | None
    error: str | None = None


def discover(
    paths: list[Path],
    *,
    recursive: bool = True,
    on_skip: Callable[[Path, str], None] | None = None,
) -> Iterator[tuple[Path, Path]]:
    """``(root, file)`` for every supported file under ``paths``, sorted, sidecars skipped.

    Other files in a folder are passed over; ``on_skip(file, reason)`` hears of each, so a caller
    can say what was not ingested (a file named explicitly is always yielded: its load says why)."""
    for root in paths:
        if root.is_file():
            yield root.parent, root
            continue
        pattern = "**/*" if recursive else "*"
        for f in sorted(root.glob(pattern)):
            if not f.is_file() or f.name.endswith(SIDECAR):
                continue
            if f.suffix.lower() in EXTENSIONS:
                yield root, f
            elif on_skip is not None:
                kind = f"'{f.suffix}'" if f.suffix else "no extension"
                on_skip(f, f"unsupported file type ({kind})")


def load(
    root: Path, path: Path, *, tenant: str, default_acl: Acl, version: int | None = None
) -> FileDocument:
    sidecar = path.with_name(path.name + SIDECAR)
    meta: dict[str, object] = {}
    try:
        if sidecar.exists():
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
        data = path.read_bytes()
        rel = path.relative_to(root).as_posix()
        doc = Document.model_validate(
            {
                "id": meta.get("id", rel),
                "version": meta.get("version", version if version is not None else 1),
                "tenant": tenant,
                "acl": meta.get("acl", default_acl.model_dump()),
                "source": rel,
                "title": meta.get("title", ""),
                "content_base64": base64.b64encode(data).decode(),
                "content_type": detect_content_type(data, filename=path.name),
                "metadata": meta.get("metadata", {}),
            }
        )
        return FileDocument(path, doc)
    except (OSError, json.JSONDecodeError) as exc:
        return FileDocument(path, None, f"cannot read: {exc}")
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        return FileDocument(path, None, f"invalid metadata ({sidecar.name}): {loc}: {first['msg']}")
    except Exception as exc:  # detection errors are RampartError with a clear message
        return FileDocument(
            path, None, str(getattr(exc, "message", exc)) + f" (supported: {SUPPORTED_TYPES})"
        )
