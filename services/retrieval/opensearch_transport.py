"""Requests to OpenSearch as the index sends them: which are retried, and how failures read.

Requests that are safe to repeat (searches, GETs, ``_analyze``, bulks of writes by id) are retried on
429, 5xx and lost connections with exponential back-off and jitter; the others are sent once. Every
OpenSearch failure becomes a ``RampartError`` naming the node and the fix, and a search that timed out
or lost shards is an error, never a complete-looking answer.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as ClientConnectionError
from opensearchpy.exceptions import ConnectionTimeout, NotFoundError, TransportError

from services.common.errors import ErrorCode, RampartError
from services.retrieval.config import OpenSearchSettings
from services.retrieval.opensearch_node import unreachable

T = TypeVar("T")
BLOCKED = "cluster_block_exception"
BLOCKED_HINT = (
    "; writes are blocked there: a `rampart index migrate` is running (retry once it has swapped the "
    "aliases) or the node's disk is full"
)
BULK_ACTIONS = 500  # items per bulk request (a chunk with two 384-d vectors is ~8 KB of JSON)
MGET_BATCH = 1000


def connect(settings: OpenSearchSettings) -> Transport:
    """A client for ``settings.endpoint()`` (no request yet) with TLS, and basic auth or SigV4, as
    configured."""
    url = settings.endpoint()
    auth = _auth(settings)
    client = OpenSearch(
        hosts=[url],
        http_auth=auth,
        use_ssl=url.startswith("https://"),
        verify_certs=settings.verify_certs,
        ca_certs=str(settings.ca_certs) if settings.ca_certs else None,
        timeout=settings.timeout_s,
        pool_maxsize=settings.connections,
        max_retries=0,  # retried in Transport.call, for idempotent requests only
        retry_on_timeout=False,
        http_compress=True,
    )
    return Transport(client, url, settings)


def _auth(settings: OpenSearchSettings) -> Any:
    if settings.aws_sigv4:
        if settings.username:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                "RAMPART_OPENSEARCH__AWS_SIGV4=true and RAMPART_OPENSEARCH__USERNAME are both set; a request "
                "is signed with one of them: unset the username (SigV4) or turn SigV4 off (basic auth)",
            )
        return sigv4_auth(settings)
    if settings.username:
        return (settings.username, settings.password.get_secret_value() if settings.password else "")
    return None


def sigv4_auth(settings: OpenSearchSettings) -> Any:
    """opensearch-py's SigV4 signer for the client's connection class, with credentials from the
    standard AWS chain (botocore's, which boto3 uses too): refreshed credentials are frozen per request."""
    try:
        import botocore.session
    except ImportError as exc:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            "RAMPART_OPENSEARCH__AWS_SIGV4=true needs botocore, which is not installed; install the aws extra "
            "(pip install -c requirements/constraints.txt -e '.[aws]') or turn SigV4 off",
        ) from exc
    from opensearchpy import Urllib3AWSV4SignerAuth

    session = botocore.session.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            "RAMPART_OPENSEARCH__AWS_SIGV4=true but the AWS credential chain found no credentials (looked at "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, the container and instance "
            "roles); provide some or turn SigV4 off",
        )
    region = settings.aws_region or session.get_config_variable("region")
    if not region:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            "RAMPART_OPENSEARCH__AWS_SIGV4=true needs the domain's region: set RAMPART_OPENSEARCH__AWS_REGION "
            "(or AWS_DEFAULT_REGION, or region in ~/.aws/config)",
        )
    return Urllib3AWSV4SignerAuth(credentials, str(region), settings.aws_service)


class Transport:
    """One OpenSearch client with the retry and error policy of the module doc."""

    def __init__(self, client: OpenSearch, url: str, settings: OpenSearchSettings) -> None:
        self.client = client
        self.url = url
        self._s = settings

    def close(self) -> None:
        self.client.close()

    def call(self, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        """``fn()``, retried with back-off on 429, 5xx and lost connections when ``idempotent``;
        OpenSearch's errors become ``RampartError`` naming the node and the fix."""
        attempts = 1 + (self._s.retries if idempotent else 0)
        delay = self._s.backoff_s
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                return fn()
            except ConnectionTimeout as exc:
                if last:
                    raise RampartError(
                        ErrorCode.DEADLINE_EXCEEDED,
                        f"OpenSearch at {self.url} did not answer {what} within {self._s.timeout_s} s "
                        "(RAMPART_OPENSEARCH__TIMEOUT_S)",
                        url=self.url,
                    ) from exc
            except ClientConnectionError as exc:
                if last:
                    raise unreachable(self.url, exc) from exc
            except NotFoundError as exc:
                raise RampartError(
                    ErrorCode.NOT_FOUND, f"{what}: not found at {self.url}: {_reason(exc)}", url=self.url
                ) from exc
            except TransportError as exc:
                status = exc.status_code if isinstance(exc.status_code, int) else 0
                blocked = BLOCKED in _reason(exc)
                transient = status == 429 or status >= 500 or blocked
                if last or not transient:
                    code = ErrorCode.UNAVAILABLE if transient else ErrorCode.INTERNAL
                    raise RampartError(
                        code,
                        f"OpenSearch at {self.url} refused {what} (HTTP {status}): {_reason(exc)}"
                        + (BLOCKED_HINT if blocked else ""),
                        url=self.url,
                        status=status,
                    ) from exc
            time.sleep(delay * (1.0 + 0.2 * random.random()))  # jitter, not crypto
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def search(self, alias: str, body: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """The hits of one search; partial results (failed shards, a timeout) are an error, never
        returned as if complete."""
        with naming(alias, what):
            resp = self.call(what, lambda: self.client.search(index=alias, body=body), idempotent=True)
        complete(resp, alias, self.url)
        hits: list[dict[str, Any]] = resp["hits"]["hits"]
        return hits

    def bulk(self, lines: list[dict[str, Any]], what: str, refresh: bool) -> list[dict[str, Any]]:
        """Run bulk ``lines`` (action, source, …) in requests of ``BULK_ACTIONS``; return one result
        item per action."""
        items: list[dict[str, Any]] = []
        actions = split_actions(lines)
        for start in range(0, len(actions), BULK_ACTIONS):
            part = [line for action in actions[start : start + BULK_ACTIONS] for line in action]
            # every request of a refreshing bulk waits: with several shards, the last request need
            # not touch the shards the earlier ones wrote to
            policy = self._s.refresh if refresh else "false"
            resp = self.call(
                what,
                functools.partial(self.client.bulk, body=part, refresh=policy),
                idempotent=True,
            )
            items += [next(iter(item.values())) for item in resp["items"]]
        return items

    def mget(self, alias: str, ids: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``_source`` (only ``fields``) of the documents that exist among ``ids`` (real-time)."""
        return {k: v[0] for k, v in self.mget_versioned(alias, ids, fields).items()}

    def mget_versioned(
        self, alias: str, ids: Sequence[str], fields: Sequence[str]
    ) -> dict[str, tuple[dict[str, Any], int, int]]:
        """:meth:`mget` with each document's ``_seq_no`` and ``_primary_term``: what a conditional write
        (``if_seq_no``/``if_primary_term``) of it names, so that it lands only on what was read."""
        out: dict[str, tuple[dict[str, Any], int, int]] = {}
        for start in range(0, len(ids), MGET_BATCH):
            part = list(ids[start : start + MGET_BATCH])
            with naming(alias, "read"):
                resp = self.call(
                    "read",
                    functools.partial(
                        self.client.mget,
                        index=alias,
                        body={"ids": part},
                        params={"_source_includes": ",".join(fields)},
                    ),
                    idempotent=True,
                )
            for d in resp["docs"]:
                if d.get("found"):
                    out[d["_id"]] = (d.get("_source", {}), int(d["_seq_no"]), int(d["_primary_term"]))
                elif "error" in d:
                    raise RampartError(
                        ErrorCode.UNAVAILABLE,
                        f"reading {alias} at {self.url} failed: {d['error']}",
                        url=self.url,
                    )
        return out


@contextlib.contextmanager
def naming(alias: str, what: str) -> Iterator[None]:
    """A failed request's error says which index it read (a search that fails because the node went
    away names the index it could not search, not only the URL)."""
    try:
        yield
    except RampartError as exc:
        raise RampartError(
            exc.code, f"{what} on the index {alias} failed: {exc.message}", **{**exc.details, "index": alias}
        ) from exc


def split_actions(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Bulk lines grouped per action (a delete has no source line; index and update have one)."""
    out: list[list[dict[str, Any]]] = []
    i = 0
    while i < len(lines):
        action = lines[i]
        if "delete" in action:
            out.append([action])
            i += 1
        else:
            out.append([action, lines[i + 1]])
            i += 2
    return out


def item_reason(item: dict[str, Any]) -> str:
    """A bulk item's error with its cause (where OpenSearch says what was wrong with the value)."""
    err = item.get("error")
    if not isinstance(err, dict):
        return str(err)
    reason = f"{err.get('type', 'error')}: {err.get('reason', '')}"
    cause = err.get("caused_by")
    if isinstance(cause, dict) and cause.get("reason"):
        reason += f" (caused by {cause.get('type', '')}: {cause['reason']})"
    return reason + (BLOCKED_HINT if BLOCKED in reason else "")


def _reason(exc: TransportError) -> str:
    info = exc.info if isinstance(exc.info, dict) else {}
    err = info.get("error")
    if isinstance(err, dict):
        return f"{err.get('type', '')}: {err.get('reason', '')}"
    return str(exc.error)


def complete(resp: dict[str, Any], alias: str, url: str) -> None:
    """Refuse partial results: a search that timed out or lost shards is an error naming the index."""
    shards = resp.get("_shards", {})
    if resp.get("timed_out") or shards.get("failed", 0):
        raise RampartError(
            ErrorCode.UNAVAILABLE,
            f"search on {alias} at {url} returned partial results ({shards.get('failed', 0)} of "
            f"{shards.get('total', '?')} shards failed, timed out: {bool(resp.get('timed_out'))}); retry, "
            "and check the cluster's health",
            index=alias,
        )


def alias_target(t: Transport, alias: str, fix: str) -> str | None:
    """The one index ``alias`` points at, ``None`` when there is no such alias. An alias over several
    indexes is refused (FAILED_PRECONDITION) naming them and ``fix``: which one holds the data is a
    decision for its operator, not a guess."""
    if not t.call("find alias", lambda: t.client.indices.exists_alias(name=alias), idempotent=True):
        return None
    names = sorted(t.call("get alias", lambda: t.client.indices.get_alias(name=alias), idempotent=True))
    if len(names) != 1:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"the alias {alias} at {t.url} points at {len(names)} indexes ({', '.join(names)}); {fix}",
            alias=alias,
        )
    return str(names[0])
