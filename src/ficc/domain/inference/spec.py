"""The service spec: one checked value, made only by :func:`parse_service_spec`.

The web layer, the CLI and remote peers all reach a service through this parse, so a refused
spec names every field that refused it, with its rule, in one answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar

from ficc.base.errors import InvalidInput
from ficc.base.ids import parse_id
from ficc.domain.inference.restarts import DEFAULT_RESTART, RestartPolicy
from ficc.domain.inference.runtimes import (
    RuntimeName,
    integer_between,
    one_of,
    parse_options,
    uses_local_model,
)

MAX_REPLICAS: Final = 16
"""More replicas than this on one node is a typo, not a plan."""

MAX_MODEL_NAME_CHARS: Final = 256
SPEC_FIELDS: Final = frozenset(
    {"name", "model", "runtime", "node", "replicas", "options", "restart"}
)
_REQUIRED_FIELDS: Final = ("name", "model", "runtime")
_SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_UPSTREAM_MODEL_NAME = re.compile(r"^[\x21-\x7e][\x20-\x7e]*$")


_T = TypeVar("_T")
_E = TypeVar("_E", bound=StrEnum)


@dataclass(frozen=True)
class ServiceSpec:
    """A checked service spec; made only by :func:`parse_service_spec`.

    ``model`` is a local model ID for ``llama.cpp`` and ``vllm``; for ``openai`` it is the model
    name the upstream server knows. ``node`` is a node ID, or ``None`` for the local node.
    """

    name: str
    model: str
    runtime: RuntimeName
    node: str | None
    replicas: int
    options: Mapping[str, Any] = field(default_factory=dict)
    restart: RestartPolicy = DEFAULT_RESTART

    def to_json(self) -> dict[str, Any]:
        """The spec as the API shows it, options and restart with their defaults filled in."""
        return {
            "name": self.name,
            "model": self.model,
            "runtime": self.runtime.value,
            "node": self.node,
            "replicas": self.replicas,
            "options": dict(self.options),
            "restart": self.restart.value,
        }


def _parse_name(value: object) -> str:
    if not isinstance(value, str) or not _SERVICE_NAME.fullmatch(value):
        raise InvalidInput(
            "name must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="name",
        )
    return value


def _choice(kind: type[_E], name: str, value: object) -> _E:
    """A member of ``kind`` by its value; refused naming ``name`` and every allowed value."""
    return kind(one_of(*(member.value for member in kind))(name, value))


def _parse_model(runtime: RuntimeName, value: object) -> str:
    if uses_local_model(runtime):
        return parse_id("model", value, field="model")
    if (
        not isinstance(value, str)
        or len(value) > MAX_MODEL_NAME_CHARS
        or not _UPSTREAM_MODEL_NAME.fullmatch(value)
    ):
        raise InvalidInput(
            f"model must be the upstream model name: 1-{MAX_MODEL_NAME_CHARS} printable "
            "ASCII characters",
            field="model",
        )
    return value


def parse_service_spec(data: object) -> ServiceSpec:
    """Check a spec as sent by a user or a peer; refuse naming every bad field at once.

    One refusal lists each missing or wrong field with its rule and allowed values, so that a
    caller fixes the spec in one go instead of one field per round trip.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("spec must be an object", field="spec")
    problems: list[InvalidInput] = []
    unknown = sorted(str(key) for key in data if key not in SPEC_FIELDS)
    for key in unknown:
        problems.append(
            InvalidInput(
                f"spec field {key} is unknown (allowed: {', '.join(sorted(SPEC_FIELDS))})",
                field=key,
                details={"allowed": sorted(SPEC_FIELDS)},
            )
        )
    for key in _REQUIRED_FIELDS:
        if key not in data:
            problems.append(_missing(key))
    name = _checked(problems, lambda: _parse_name(data["name"]), "name" in data)
    runtime = _checked(
        problems, lambda: _choice(RuntimeName, "runtime", data["runtime"]), "runtime" in data
    )
    model = node = options = None
    if runtime is not None:
        model = _checked(problems, lambda: _parse_model(runtime, data["model"]), "model" in data)
        options = _checked(problems, lambda: parse_options(runtime, data.get("options")), True)
    if data.get("node") is not None:
        node = _checked(problems, lambda: parse_id("node", data["node"], field="node"), True)
    replicas = _checked(
        problems,
        lambda: integer_between(1, MAX_REPLICAS)("replicas", data.get("replicas", 1)),
        True,
    )
    restart = _checked(
        problems,
        lambda: _choice(RestartPolicy, "restart", data.get("restart", DEFAULT_RESTART.value)),
        True,
    )
    if problems or name is None or runtime is None or model is None:
        raise _all_of(problems)
    if replicas is None or options is None or restart is None:
        raise _all_of(problems)
    return ServiceSpec(name, model, runtime, node, replicas, options, restart)


def _checked(problems: list[InvalidInput], parse: Callable[[], _T], present: bool) -> _T | None:
    """The parsed value, or None with the refusal added to ``problems``."""
    if not present:
        return None
    try:
        return parse()
    except InvalidInput as exc:
        problems.append(exc)
        return None


def _missing(key: str) -> InvalidInput:
    if key == "runtime":
        allowed = [runtime.value for runtime in RuntimeName]
        return InvalidInput(
            f"runtime is required: one of {', '.join(allowed)}",
            field="runtime",
            details={"allowed": allowed},
        )
    if key == "model":
        return InvalidInput(
            "model is required: a model ID (mdl_...) of this project, or the upstream model "
            "name for runtime openai",
            field="model",
        )
    return InvalidInput(f"{key} is required", field=key)


def _all_of(problems: list[InvalidInput]) -> InvalidInput:
    """One refusal for several: the first field in ``field``, every one in ``fields``."""
    if not problems:
        return InvalidInput("spec is incomplete", field="spec")
    if len(problems) == 1:
        return problems[0]
    fields = [{"message": problem.message, **problem.details} for problem in problems]
    return InvalidInput(
        "; ".join(problem.message for problem in problems),
        field=str(problems[0].details.get("field")),
        details={"fields": fields},
    )
