"""Unknown ``RAMPART_<GROUP>__<FIELD>`` variables are refused, not ignored.

pydantic-settings drops an environment variable that names no field, so a misspelt or renamed setting
(``RAMPART_RERANK__DEADLINE_MS`` for ``RAMPART_RERANK__TRITON__DEADLINE_MS``) would leave the default
running while the operator believes it changed: the worst kind of configuration error, because
nothing fails. A variable with the nested delimiter (``__``) can only mean a setting, so each one must
name a field; the error names the variable and the closest real one. Variables without ``__``
(``RAMPART_URL``, ``RAMPART_API_KEY`` of the CLI, the bench's ``RAMPART_BENCH_*``) are other tools'
and are left alone. A dict-valued field (``RAMPART_CORPUS__TENANTS``) takes any deeper key.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

PREFIX = "RAMPART_"
DELIMITER = "__"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (also inside ``X | None``), or ``None`` for a value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        models = [m for m in map(_model_of, get_args(annotation)) if m is not None]
        return models[0] if len(models) == 1 else None
    return None


def _is_dict(annotation: Any) -> bool:
    """A dict-valued field (also ``dict[...] | None``), whose keys the variable's name may carry."""
    if annotation is dict or get_origin(annotation) is dict:
        return True
    return get_origin(annotation) in (Union, types.UnionType) and any(map(_is_dict, get_args(annotation)))


def _names(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, bool]]:
    """Every variable name under ``prefix``, with whether deeper keys are allowed (dict values)."""
    for name, field in model.model_fields.items():
        env = f"{prefix}{name.upper()}"
        inner = _model_of(field.annotation)
        if inner is not None:
            yield env, False
            yield from _names(inner, env + DELIMITER)
        else:
            yield env, _is_dict(field.annotation)


@cache
def _known(model: type[BaseModel]) -> tuple[frozenset[str], tuple[str, ...]]:
    names = dict(_names(model, PREFIX))
    return frozenset(names), tuple(sorted(n + DELIMITER for n, open_ in names.items() if open_))


def unknown_variables(model: type[BaseModel], environ: Mapping[str, str]) -> list[str]:
    """The nested ``RAMPART_*__*`` variables of ``environ`` that name no field of ``model``."""
    exact, open_prefixes = _known(model)
    return sorted(
        key
        for key in environ
        if key.upper().startswith(PREFIX)
        and DELIMITER in key
        and key.upper() not in exact
        and not key.upper().startswith(open_prefixes)
    )


def environment_problem(model: type[BaseModel], environ: Mapping[str, str]) -> str | None:
    """What is wrong with ``environ``'s setting variables, naming each unknown one and the closest
    real one; ``None`` when every one names a setting."""
    unknown = unknown_variables(model, environ)
    if not unknown:
        return None
    exact, _ = _known(model)
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key.upper(), exact, n=1, cutoff=0.6)
        hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
    return (
        f"unknown setting variable(s): {'; '.join(hints)}. A RAMPART_<GROUP>__<FIELD> variable must name "
        "a setting (docs/configuration.md lists them all); rename it, or unset it"
    )
