"""One OpenAI-compatible chat client for every stage that asks a model (judge, rewrite, sub-queries,
answers): retries on the retryable failures only, a timeout, and logs that never carry text or keys.

Retrieved text is hostile input: :func:`fence` gives per-call random delimiters a passage cannot
close, and :func:`first_json_object` parses replies strictly (models wrap JSON in prose or fences).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from typing import Any
from urllib.parse import urlsplit

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from services.common.config import LlmSettings
from services.common.http_retry import RetryableStatusError, raise_for_retryable, retryable

log = logging.getLogger(__name__)


def llm_model_id(settings: LlmSettings) -> str:
    """``llm:<model>@<host[:port]>``: names the model in cache keys and logs, never credentials."""
    parts = urlsplit(settings.base_url or "")
    host = parts.hostname or "unset"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"llm:{settings.model}@{host}{f':{port}' if port else ''}"


def fence(label: str) -> tuple[str, str]:
    """``(open, close)`` delimiter lines with a random code: data between them cannot fake the close."""
    tag = secrets.token_hex(6)
    return f"<<<{label} {tag}>>>", f"<<<END {label} {tag}>>>"


def first_json_object(reply: str) -> dict[str, Any] | None:
    """The first JSON object in ``reply`` (prose or code fences around it are ignored), else ``None``."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", reply):
        try:
            obj, _ = decoder.raw_decode(reply, m.start())
        except json.JSONDecodeError:
            continue
        return obj if isinstance(obj, dict) else None
    return None


def describe_failure(exc: Exception, settings: LlmSettings) -> str:
    """Why a call got no answer, with the setting to check (no text, no key)."""
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {settings.timeout_s:g} s (raise RAMPART_LLM__TIMEOUT_S?)"
    if isinstance(exc, httpx.HTTPStatusError | RetryableStatusError):
        status = exc.response.status_code if isinstance(exc, httpx.HTTPStatusError) else exc.status
        hint = {
            401: "; check RAMPART_LLM__API_KEY",
            403: "; check RAMPART_LLM__API_KEY",
            404: "; check RAMPART_LLM__BASE_URL (the API root, e.g. .../v1) and RAMPART_LLM__MODEL",
        }.get(status, "")
        return f"HTTP {status}{hint}"
    if isinstance(exc, httpx.HTTPError):
        return f"unreachable ({type(exc).__name__}); is the server at RAMPART_LLM__BASE_URL up?"
    return f"failed ({type(exc).__name__})"


class ChatClient:
    """``POST {base_url}/chat/completions``; thread-safe (``httpx.Client`` is)."""

    def __init__(self, settings: LlmSettings) -> None:
        if settings.base_url is None:
            raise ValueError(
                "an LLM stage needs llm.base_url; set RAMPART_LLM__BASE_URL (e.g. http://127.0.0.1:8000/v1)"
            )
        self.settings = settings
        self._url = settings.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if settings.api_key is not None:
            headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._client = httpx.Client(timeout=httpx.Timeout(settings.timeout_s), headers=headers)

    @property
    def model_id(self) -> str:
        return llm_model_id(self.settings)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> str | None:
        """The reply's text (``None`` if the response has none); raises on transport and HTTP errors
        after retrying the retryable ones."""
        body = {
            "model": self.settings.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": max_tokens or self.settings.max_tokens,
        }
        for attempt in Retrying(
            stop=stop_after_attempt(self.settings.retries + 1),
            wait=wait_exponential(multiplier=0.1, max=1.0),
            retry=retry_if_exception(retryable),
            reraise=True,
        ):
            with attempt:
                response = self._client.post(self._url, json=body)
                raise_for_retryable(response)
                return _content(response)
        return None  # pragma: no cover  (Retrying either returns inside the loop or raises)

    def close(self) -> None:
        self._client.close()


def _content(response: httpx.Response) -> str | None:
    """``choices[0].message.content`` of a chat completion, or ``None`` if the body is not one."""
    try:
        data: Any = response.json()
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None
