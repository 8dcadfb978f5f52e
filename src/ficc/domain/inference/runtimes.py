"""The engines FICC can run a service on, and the options each takes, checked by one table.

A runtime's options are a table of checks and defaults (:data:`RUNTIME_OPTIONS`): adding an
option is one row, and an unknown or wrong one is refused naming ``options.NAME`` and its rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ficc.base.errors import InvalidInput
from ficc.base.numbers import parse_integer_between
from ficc.domain.inference.base_urls import parse_base_url


class RuntimeName(StrEnum):
    """The engines FICC can run a service on."""

    LLAMA_CPP = "llama.cpp"
    OPENAI = "openai"
    VLLM = "vllm"


def uses_local_model(runtime: RuntimeName) -> bool:
    """Whether ``spec.model`` is a local model ID whose files the runtime loads."""
    return runtime is not RuntimeName.OPENAI


@dataclass(frozen=True)
class _Option:
    """One option of a runtime: its check and its default (``None``: absent unless given)."""

    check: Callable[[str, object], Any]
    default: Any = None
    required: bool = False


def integer_between(low: int, high: int) -> Callable[[str, object], int]:
    def check(name: str, value: object) -> int:
        return parse_integer_between(value, name, low, high)

    return check


def _number(low: float, high: float) -> Callable[[str, object], float]:
    def check(name: str, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise InvalidInput(
                f"{name} must be a number from {low} to {high}",
                field=name,
                details={"minimum": low, "maximum": high},
            )
        return float(value)

    return check


def _boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false", field=name)
    return value


def one_of(*choices: str) -> Callable[[str, object], str]:
    def check(name: str, value: object) -> str:
        if value not in choices:
            raise InvalidInput(
                f"{name} must be one of {', '.join(choices)}",
                field=name,
                details={"allowed": list(choices)},
            )
        assert isinstance(value, str)
        return value

    return check


DEFAULT_LLAMA_CPP_THREADS: Final = 1
"""engine.md: more than one thread was erratic on two cores."""

DEFAULT_LLAMA_CPP_CTX: Final = 2048

RUNTIME_OPTIONS: Final[Mapping[RuntimeName, Mapping[str, _Option]]] = {
    RuntimeName.LLAMA_CPP: {
        "n_threads": _Option(integer_between(1, 256), default=DEFAULT_LLAMA_CPP_THREADS),
        "n_ctx": _Option(integer_between(128, 1_048_576), default=DEFAULT_LLAMA_CPP_CTX),
        "n_batch": _Option(integer_between(1, 65_536)),
        "n_gpu_layers": _Option(integer_between(0, 10_000), default=0),
        "seed": _Option(integer_between(0, 2**32 - 1)),
        # Embeddings need the server's --embedding, with which this runtime serves nothing else.
        "embeddings": _Option(_boolean),
    },
    RuntimeName.OPENAI: {
        "base_url": _Option(parse_base_url, required=True),
    },
    RuntimeName.VLLM: {
        "tensor_parallel_size": _Option(integer_between(1, 64), default=1),
        "max_model_len": _Option(integer_between(128, 10_485_760)),
        "gpu_memory_utilization": _Option(_number(0.05, 0.99)),
        "dtype": _Option(one_of("auto", "float16", "bfloat16", "float32"), default="auto"),
        "enforce_eager": _Option(_boolean, default=False),
    },
}


def parse_options(runtime: RuntimeName, value: object) -> dict[str, Any]:
    """Check ``options`` against the runtime's table; unknown options are refused."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidInput("options must be an object", field="options")
    table = RUNTIME_OPTIONS[runtime]
    for key in value:
        if key not in table:
            allowed = ", ".join(sorted(table))
            raise InvalidInput(
                f"options.{key} is not an option of runtime {runtime.value} (allowed: {allowed})",
                field=f"options.{key}",
                details={"allowed": sorted(table)},
            )
    options: dict[str, Any] = {}
    for key, option in table.items():
        name = f"options.{key}"
        if key in value:
            options[key] = option.check(name, value[key])
        elif option.required:
            raise InvalidInput(f"{name} is required for runtime {runtime.value}", field=name)
        elif option.default is not None:
            options[key] = option.default
    return options
