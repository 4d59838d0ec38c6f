"""Triton's caller key: who may call the reranker's Triton besides "anyone the CA signed".

Mutual TLS on Triton's gRPC port admits every certificate of the deployment's CA, and Triton has no
list of client names, so the gateway's or a worker's certificate could run inference too; its HTTP port
(the kubelet's probes) has no TLS at all. Triton can instead require a header on every API but one
(``--grpc-restricted-protocol`` / ``--http-restricted-api``): Rampart restricts everything except
health to requests carrying ``x-rampart-triton-key`` with the deployment's key (``rerank.triton.key``),
on both ports (gRPC metadata takes Triton's ``triton-grpc-protocol-`` prefix), so probes still work
and a caller without the key gets nothing but liveness.

The key is its own secret, not the deployment token, because Triton takes it on its command line:
any user of the host (or the pod) who can read ``/proc/<pid>/cmdline`` can read it, and what it opens
is Triton's inference only, never the services' RPCs.
"""

from __future__ import annotations

import re

from services.common.errors import ErrorCode, RampartError

KEY_HEADER = "x-rampart-triton-key"  # HTTP's header; gRPC's carries Triton's prefix (GRPC_KEY_HEADER)
GRPC_KEY_HEADER = f"triton-grpc-protocol-{KEY_HEADER}"
# Triton refuses a call without the key with gRPC UNAVAILABLE (HTTP 403) and this text: a refusal, not
# an outage, so clients must neither retry it nor report the server down
REFUSAL_TEXT = "is restricted, expecting header"

# Every restrictable API but ``health`` (Triton 2.51's list): model metadata and configuration name
# the model and its parameters; statistics, trace and logging reveal or change what it serves.
RESTRICTED_APIS = (
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

# Triton parses ``<apis>:<header>=<value>``: a ':' ',' or '=' inside the key would split it elsewhere.
KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,256}")


def check_key(key: str) -> str:
    """The key unchanged, or an error naming the rule but never the key (Triton would misparse a key
    with other characters in its flag, and a wrong key would still be someone's secret)."""
    if not KEY_PATTERN.fullmatch(key):
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"RAMPART_RERANK__TRITON__KEY must be 16-256 characters of A-Z a-z 0-9 _ - (it has {len(key)}, "
            "or other characters); make one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`",
        )
    return key


def restricted_flags(value: str) -> list[str]:
    """tritonserver's flags requiring ``value`` in the header on every API but health, on gRPC and
    HTTP; the chart passes ``$(RAMPART_RERANK__TRITON__KEY)``, which the kubelet expands."""
    apis = ",".join(RESTRICTED_APIS)
    return [
        f"--grpc-restricted-protocol={apis}:{KEY_HEADER}={value}",
        f"--http-restricted-api={apis}:{KEY_HEADER}={value}",
    ]


def server_flags(key: str) -> list[str]:
    """:func:`restricted_flags` of a checked key (what ``rampart triton serve`` passes)."""
    return restricted_flags(check_key(key))


def client_headers(key: str | None) -> dict[str, str] | None:
    """The gRPC metadata a client sends on every call (None: no key configured)."""
    return {GRPC_KEY_HEADER: key} if key else None


def is_refusal(message: str) -> bool:
    """Whether a Triton error says the call lacked the key (see :data:`REFUSAL_TEXT`)."""
    return REFUSAL_TEXT in message
