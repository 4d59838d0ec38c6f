"""Live tunables, Serve settings and deployment options: validated before anything is deployed."""

from __future__ import annotations

import pytest

from services.api.schemas import ErrorBody, SearchResponse
from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.orchestrator.serving.config import ServeSettings
from services.orchestrator.serving.messages import PipelineReply
from services.orchestrator.serving.serve_config import (
    LiveTunables,
    ServeAppArgs,
    apply_tunables,
    code_version,
    ingress_options,
    pipeline_options,
)


def test_tunables_apply_on_top_of_the_start_up_settings() -> None:
    base = RampartSettings()
    applied = apply_tunables(
        base,
        LiveTunables.parse({"rerank_enabled": False, "rerank_depth": 12, "grading_correct_threshold": 0.9}),
    )
    assert (applied.rerank.enabled, applied.rerank.depth) == (False, 12)
    assert applied.grading.correct_threshold == 0.9
    assert applied.grading.incorrect_threshold == base.grading.incorrect_threshold
    assert applied.factcheck == base.factcheck and base.rerank.enabled is True  # base untouched
    assert apply_tunables(base, LiveTunables()).rerank == base.rerank


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"rerank_depth": 0}, "rerank_depth"),
        ({"factcheck_depth": 101}, "factcheck_depth"),
        ({"routing_min_confidence": 1.5}, "routing_min_confidence"),
        ({"rerank_dept": 3}, "rerank_dept"),
        ({"rerank_enabled": "maybe"}, "rerank_enabled"),
        (["rerank_depth", 3], "mapping"),
    ],
)
def test_bad_tunables_are_refused_naming_the_key(config: object, words: str) -> None:
    with pytest.raises(RampartError) as err:
        LiveTunables.parse(config)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert words in err.value.message


def test_crossed_grading_thresholds_are_refused_when_applied() -> None:
    base = RampartSettings()
    low = round(base.grading.incorrect_threshold / 2, 3)  # below the start-up Incorrect threshold
    with pytest.raises(RampartError) as err:
        apply_tunables(base, LiveTunables.parse({"grading_correct_threshold": low}))
    assert f"exceeds correct_threshold={low}" in err.value.message


def test_user_config_round_trips_without_unset_keys() -> None:
    t = LiveTunables(rerank_depth=20, factcheck_enabled=False)
    assert t.to_user_config() == {"rerank_depth": 20, "factcheck_enabled": False}
    assert LiveTunables.parse(t.to_user_config()) == t
    assert LiveTunables.parse(None) == LiveTunables()
    assert ServeAppArgs.model_validate({"tunables": {"rerank_depth": 5}}).tunables.rerank_depth == 5
    # `serve run …:app_builder tunables='{"rerank_depth": 5}'` passes the JSON as a string
    assert ServeAppArgs.model_validate({"tunables": '{"rerank_depth": 5}'}).tunables.rerank_depth == 5
    with pytest.raises(ValueError, match="not JSON"):
        ServeAppArgs.model_validate({"tunables": "{rerank_depth"})


def test_deployment_options_use_fractional_cpus_and_autoscaling() -> None:
    settings = RampartSettings(
        serve=ServeSettings(pipeline_num_cpus=0.5, ingress_num_cpus=0.25, ingress_max_replicas=3)
    )
    p, i = pipeline_options(settings), ingress_options(settings)
    assert p["ray_actor_options"] == {"num_cpus": 0.5} and i["ray_actor_options"] == {"num_cpus": 0.25}
    assert i["autoscaling_config"]["max_replicas"] == 3
    assert p["autoscaling_config"]["min_replicas"] == 1 == p["autoscaling_config"]["max_replicas"]
    assert p["health_check_period_s"] == settings.serve.health_check_period_s
    # a constructor that fails (index locked) fails again: a few tries, not Serve's default 20, each
    # loading the models, so start-up reports the cause (test_serve_ray: the cause is the replica's)
    assert p["max_constructor_retry_count"] == 3


def test_autoscaling_delays_reach_serve_and_serve_accepts_the_config() -> None:
    """The delays are Serve's defaults unless set; Ray's own AutoscalingConfig validates what we pass."""
    from ray.serve.config import AutoscalingConfig

    default = pipeline_options(RampartSettings())["autoscaling_config"]
    assert (default["upscale_delay_s"], default["downscale_delay_s"]) == (30.0, 600.0)
    quick = RampartSettings(
        serve=ServeSettings(pipeline_max_replicas=2, upscale_delay_s=5, downscale_delay_s=45)
    )
    for options in (pipeline_options(quick), ingress_options(quick)):
        parsed = AutoscalingConfig(**options["autoscaling_config"])
        assert (parsed.upscale_delay_s, parsed.downscale_delay_s) == (5.0, 45.0)
    assert AutoscalingConfig(**pipeline_options(quick)["autoscaling_config"]).max_replicas == 2


def test_replica_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="ingress_min_replicas=3 exceeds"):
        ServeSettings(ingress_min_replicas=3, ingress_max_replicas=2)
    with pytest.raises(ValueError):
        ServeSettings(pipeline_num_cpus=0)


def test_code_version_ignores_serve_options_but_not_pipeline_settings() -> None:
    base = RampartSettings()
    same = RampartSettings(serve=ServeSettings(port=9999))
    other = RampartSettings(fusion={"bm25_weight": 0.3, "dense_weight": 0.7})
    assert code_version(base) == code_version(same)
    assert code_version(base) != code_version(other)


def test_reply_unwraps_to_the_original_error() -> None:
    reply = PipelineReply.failed(RampartError(ErrorCode.PERMISSION_DENIED, "no", tenant="x"))
    assert reply.status == 403 and reply.response is None
    with pytest.raises(RampartError) as err:
        reply.unwrap()
    assert err.value.code is ErrorCode.PERMISSION_DENIED and err.value.details == {"tenant": "x"}
    ok = SearchResponse(query="q", results=[], candidates={}, timings_ms={}, request_id="")
    assert PipelineReply.ok(ok).unwrap() is ok
    with pytest.raises(RampartError):
        PipelineReply(error=ErrorBody(code="internal", message="boom"), status=500).unwrap()


def test_build_app_refuses_several_pipeline_replicas_on_the_embedded_index() -> None:
    from services.orchestrator.serving.serve_app import build_app

    settings = RampartSettings(serve=ServeSettings(pipeline_max_replicas=2))
    with pytest.raises(RampartError) as err:
        build_app(settings)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert (
        "pipeline_max_replicas=2" in err.value.message
        and "RAMPART_INDEX__BACKEND=opensearch" in err.value.message
    )
    with pytest.raises(RampartError, match="depth"):
        build_app(RampartSettings(), LiveTunables.model_construct(rerank_depth=0))


def test_several_pipeline_replicas_are_allowed_on_a_shared_index() -> None:
    """The retrieval service's index or OpenSearch: every replica is a client of the same index."""
    from services.orchestrator.serving.serve_app import shared_index
    from services.retrieval.config import IndexSettings

    assert not shared_index(RampartSettings())
    assert shared_index(RampartSettings(index=IndexSettings(backend="opensearch")))
    remote = RampartSettings.model_validate({"remote": {"retrieval_address": "127.0.0.1:50051"}})
    assert shared_index(remote)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.7", "orchestrator"])
def test_build_app_refuses_an_exposed_ingress_without_the_internal_token(host: str) -> None:
    from services.orchestrator.serving.serve_app import build_app

    settings = RampartSettings(serve=ServeSettings(host=host))
    with pytest.raises(RampartError) as err:
        build_app(settings)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "RAMPART_REMOTE__INTERNAL_TOKEN" in err.value.message and repr(host) in err.value.message


def test_ingress_exposure_allows_loopback_or_a_token() -> None:
    from services.orchestrator.serving.serve_app import check_ingress_exposure

    check_ingress_exposure("127.0.0.1", None)
    check_ingress_exposure("::1", None)
    check_ingress_exposure("0.0.0.0", "a-token")
