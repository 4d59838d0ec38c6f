"""The header that proves a call to an internal service comes from the gateway (``remote.internal_token``)."""

INTERNAL_TOKEN_HEADER = "x-rampart-internal-token"  # noqa: S105 - a header name, not a secret
