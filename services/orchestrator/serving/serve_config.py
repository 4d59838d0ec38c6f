"""Typed configuration of the Ray Serve app: live tunables, builder args, deployment options.

Nothing here imports Ray, so the embedded mode and the unit tests use the same validation. Settings
that need a restart (models, index, replicas) live in :class:`ServeSettings`; what may change while
replicas run (``reconfigure``) is :class:`LiveTunables`, applied on top of the start-up settings.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from services.common.errors import invalid
from services.common.settings import RampartSettings
from services.factcheck.config import FactCheckSettings
from services.orchestrator.corrective.config import GradingSettings
from services.orchestrator.routing.config import RoutingSettings
from services.rerank.config import RerankSettings

M = TypeVar("M", bound=BaseModel)

PIPELINE_CONSTRUCTOR_TRIES = 3


class LiveTunables(BaseModel):
    """Serve ``user_config``: ``None`` keeps the start-up setting, so a partial config is deterministic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rerank_enabled: bool | None = Field(default=None, description="Rerank searches (rerank.enabled)")
    rerank_depth: int | None = Field(
        default=None, ge=1, le=1000, description="Fused candidates reranked (rerank.depth)"
    )
    factcheck_enabled: bool | None = Field(
        default=None, description="Fact-check searches (factcheck.enabled)"
    )
    factcheck_depth: int | None = Field(
        default=None, ge=1, le=100, description="Top results judged (factcheck.depth)"
    )
    routing_min_confidence: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Router confidence floor (routing.min_confidence)"
    )
    grading_correct_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="CRAG Correct threshold (grading.correct_threshold)"
    )
    grading_incorrect_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="CRAG Incorrect threshold (grading.incorrect_threshold)"
    )

    @classmethod
    def parse(cls, user_config: object) -> LiveTunables:
        """Validate a Serve ``user_config`` (a dict); refuse anything else with the field and the fix."""
        if user_config is None:
            return cls()
        if isinstance(user_config, LiveTunables):
            return user_config
        if not isinstance(user_config, dict):
            raise invalid(
                f"user_config must be a mapping of tunables, got {type(user_config).__name__}; "
                f"allowed keys: {sorted(cls.model_fields)}"
            )
        try:
            return cls.model_validate(user_config)
        except ValidationError as exc:
            raise _refusal(exc) from None

    def to_user_config(self) -> dict[str, Any]:
        """The JSON-safe dict Serve stores and hands to ``reconfigure``."""
        return self.model_dump(mode="json", exclude_none=True)


def apply_tunables(base: RampartSettings, tunables: LiveTunables) -> RampartSettings:
    """``base`` with the tunables applied, every affected section re-validated (model_copy is not)."""
    t = tunables
    try:
        rerank = _revalidate(RerankSettings, base.rerank, enabled=t.rerank_enabled, depth=t.rerank_depth)
        factcheck = _revalidate(
            FactCheckSettings, base.factcheck, enabled=t.factcheck_enabled, depth=t.factcheck_depth
        )
        routing = _revalidate(RoutingSettings, base.routing, min_confidence=t.routing_min_confidence)
        grading = _revalidate(
            GradingSettings,
            base.grading,
            correct_threshold=t.grading_correct_threshold,
            incorrect_threshold=t.grading_incorrect_threshold,
        )
    except ValidationError as exc:
        raise _refusal(exc) from None
    return base.model_copy(
        update={"rerank": rerank, "factcheck": factcheck, "routing": routing, "grading": grading}
    )


def _revalidate(kind: type[M], current: M, **changes: object) -> M:
    given = {k: v for k, v in changes.items() if v is not None}
    if not given:
        return current
    return kind.model_validate({**current.model_dump(), **given})


def _refusal(exc: ValidationError) -> Exception:
    problems = [
        {"field": ".".join(str(p) for p in e.get("loc", ())) or "user_config", "problem": e.get("msg", "")}
        for e in exc.errors()[:10]
    ]
    first = problems[0]
    return invalid(
        f"refused live config: {first['field']}: {first['problem']}; nothing was applied (allowed keys: {sorted(LiveTunables.model_fields)})",
        errors=problems,
    )


class ServeAppArgs(BaseModel):
    """Typed args of :func:`services.orchestrator.serving.serve_app.app_builder` (``serve run … key=value``).

    Everything else comes from ``RAMPART_*`` settings, read where the builder runs.
    """

    model_config = ConfigDict(extra="forbid")

    tunables: LiveTunables = Field(
        default_factory=LiveTunables, description="Initial live tunables (the pipeline's user_config)"
    )

    @field_validator("tunables", mode="before")
    @classmethod
    def _from_json(cls, value: object) -> object:
        """``serve run … tunables='{"rerank_depth": 20}'`` passes a string."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"tunables is not JSON ({exc.msg}): {value[:80]!r}") from exc
        return value


def code_version(settings: RampartSettings) -> str:
    """Deployment version: same code and settings, same version, so a tunables-only redeploy
    reconfigures the running replicas in place instead of restarting them (models load for seconds).

    Serve's imperative ``serve.run`` gives every deploy a random version otherwise (only config-file
    deploys, as on KubeRay, derive one from the import path)."""
    try:
        release = metadata.version("rampart")
    except metadata.PackageNotFoundError:
        release = "dev"
    text = release + settings.model_dump_json(exclude={"serve"})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pipeline_options(settings: RampartSettings) -> dict[str, Any]:
    """``Deployment.options`` of the pipeline (it owns the models and the index)."""
    s = settings.serve
    return {
        **_common(settings),
        "ray_actor_options": {"num_cpus": s.pipeline_num_cpus},
        "autoscaling_config": _autoscaling(s.pipeline_min_replicas, s.pipeline_max_replicas, settings),
        # a constructor that fails (index locked, model missing) fails again: give up after a few
        # tries (Serve's default is 20, each loading the models) so start-up reports the cause
        "max_constructor_retry_count": PIPELINE_CONSTRUCTOR_TRIES,
    }


def ingress_options(settings: RampartSettings) -> dict[str, Any]:
    """``Deployment.options`` of the HTTP ingress (stateless: it scales freely)."""
    s = settings.serve
    return {
        **_common(settings),
        "ray_actor_options": {"num_cpus": s.ingress_num_cpus},
        "autoscaling_config": _autoscaling(s.ingress_min_replicas, s.ingress_max_replicas, settings),
    }


def _common(settings: RampartSettings) -> dict[str, Any]:
    s = settings.serve
    return {
        "max_ongoing_requests": s.max_ongoing_requests,
        "health_check_period_s": s.health_check_period_s,
        "health_check_timeout_s": s.health_check_timeout_s,
        "graceful_shutdown_timeout_s": s.graceful_shutdown_timeout_s,
    }


def _autoscaling(low: int, high: int, settings: RampartSettings) -> dict[str, Any]:
    return {
        "min_replicas": low,
        "initial_replicas": low,
        "max_replicas": high,
        "target_ongoing_requests": settings.serve.target_ongoing_requests,
        "upscale_delay_s": settings.serve.upscale_delay_s,
        "downscale_delay_s": settings.serve.downscale_delay_s,
    }
