"""What each runtime's engine does with an OpenAI request, and the body it is sent.

Pure rules, no I/O: run after :func:`~ficc.domain.openai_requests.check_request` by the one
invocation use case, for local callers and peers alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from ficc.base.errors import InvalidInput
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH, EMBEDDINGS_PATH


def _invalid(param: str, rule: str) -> InvalidInput:
    return InvalidInput(f"Invalid '{param}': {rule}", field=param)


@dataclass(frozen=True)
class RuntimeCapabilities:
    """What a runtime's engine does with the parameters that passed :func:`check_request`.

    Where a runtime would drop a parameter silently, the request is refused with a 400 naming
    it instead; where FICC can make up for the engine (a JSON schema, base64 embeddings), it
    does, in :func:`engine_body` and :func:`shape_answer`.
    """

    many_choices: bool
    """``n`` and ``best_of`` above 1 are honoured."""
    tool_choices: frozenset[str]
    """The ``tool_choice`` values honoured; ``function`` is an object naming one tool."""
    embedding_dimensions: bool
    """``dimensions`` of an embedding is honoured."""
    token_embeddings: bool
    """Embedding ``input`` may be token IDs."""
    embeddings_option: bool
    """Embeddings come only from a service started with ``options.embeddings: true``, and such a
    service serves nothing else (llama.cpp's server)."""
    translated: bool
    """FICC turns ``json_schema`` formats and ``encoding_format`` into what the engine knows."""
    responses_api: bool = False
    """The engine serves OpenAI's Responses API itself (``/v1/responses`` is passed through);
    otherwise FICC translates it to chat completions (:mod:`ficc.domain.openai_responses`)."""
    developer_role: bool = True
    """``developer`` messages (OpenAI's current name for ``system``) reach the engine as they
    are; else they are sent as ``system``, the role they replace."""


_EVERYTHING: Final = RuntimeCapabilities(
    many_choices=True,
    tool_choices=frozenset({"none", "auto", "required", "function"}),
    embedding_dimensions=True,
    token_embeddings=True,
    embeddings_option=False,
    translated=False,
)

RUNTIME_CAPABILITIES: Final[Mapping[RuntimeName, RuntimeCapabilities]] = {
    # llama-cpp-python 0.3.36's server, measured: one choice whatever n; tools reach the model
    # only through a grammar forcing one named function (auto and required answer text as if no
    # tools were sent); response_format knows text and json_object (with an optional schema);
    # embeddings take strings only, need --embedding, and have no dimensions.
    RuntimeName.LLAMA_CPP: RuntimeCapabilities(
        many_choices=False,
        tool_choices=frozenset({"none", "function"}),
        embedding_dimensions=False,
        token_embeddings=False,
        embeddings_option=True,
        translated=True,
        developer_role=False,
    ),
    # vLLM serves /v1/responses itself, and renders the model's chat template, which knows
    # system, user and assistant: a developer message would reach it under a role the template
    # does not expect.
    RuntimeName.VLLM: replace(_EVERYTHING, responses_api=True, developer_role=False),
    RuntimeName.OPENAI: _EVERYTHING,
}
"""The one table both compatible URLs and the grantor check a request against."""


def _unsupported(runtime: RuntimeName, param: str, rule: str) -> InvalidInput:
    return _invalid(param, f"the {runtime.value} runtime {rule}")


def _tool_choice_kind(body: Mapping[str, Any]) -> str:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return "function"
    if isinstance(choice, str):
        return choice
    return "auto" if body.get("tools") else "none"


def check_capabilities(
    runtime: RuntimeName, options: Mapping[str, Any], path: str, body: Mapping[str, Any]
) -> None:
    """Refuse, naming the parameter, what the service's runtime would not do as asked.

    Run after :func:`check_request`, by both compatible URLs and by the grantor.
    """
    able = RUNTIME_CAPABILITIES[runtime]
    if able.embeddings_option:
        embeddings_on = options.get("embeddings") is True
        if path == EMBEDDINGS_PATH and not embeddings_on:
            raise _invalid(
                "model",
                "this service was started without options.embeddings: true, so it serves no "
                "embeddings",
            )
        if path != EMBEDDINGS_PATH and embeddings_on:
            raise _invalid(
                "model",
                "this service was started with options.embeddings: true and serves embeddings "
                "only; use a chat service",
            )
    if not able.many_choices:
        for param in ("n", "best_of"):
            value = body.get(param)
            if isinstance(value, int) and value > 1:
                raise _unsupported(runtime, param, "answers one choice; it must be 1")
    if path == CHAT_COMPLETIONS_PATH and _tool_choice_kind(body) not in able.tool_choices:
        honoured = ", ".join(
            "an object naming one function" if kind == "function" else kind
            for kind in sorted(able.tool_choices)
        )
        raise _unsupported(
            runtime,
            "tool_choice",
            f"honours tools only when tool_choice is {honoured}; with "
            f"{_tool_choice_kind(body)} the model would not see the tools",
        )
    if path == EMBEDDINGS_PATH:
        if body.get("dimensions") is not None and not able.embedding_dimensions:
            raise _unsupported(runtime, "dimensions", "cannot shorten embeddings")
        value = body.get("input")
        if not able.token_embeddings and isinstance(value, list) and not isinstance(value[0], str):
            raise _unsupported(runtime, "input", "embeds text only, not token IDs")


def _as_system(message: Any) -> Any:
    """A ``developer`` message as the ``system`` message it replaces; others as they are."""
    if isinstance(message, dict) and message.get("role") == "developer":
        return {**message, "role": "system"}
    return message


def engine_body(runtime: RuntimeName, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The body to send to the service's engine: OpenAI's forms it lacks, in the forms it has.

    llama.cpp knows ``{"type": "json_object", "schema": ...}`` (a grammar from the schema) but
    not OpenAI's ``json_schema`` type, answers embeddings as floats only, ignores
    ``max_completion_tokens`` (OpenAI's current name for ``max_tokens``, which LangChain sends)
    and refuses the ``developer`` role (llama.cpp's server answers it with a 500).
    """
    sent = dict(body)
    able = RUNTIME_CAPABILITIES[runtime]
    if not able.developer_role and path == CHAT_COMPLETIONS_PATH:
        messages = body["messages"]
        if any(isinstance(m, dict) and m.get("role") == "developer" for m in messages):
            sent["messages"] = [_as_system(message) for message in messages]
    if not able.translated:
        return sent
    bound = sent.pop("max_completion_tokens", None)
    if isinstance(bound, int):
        given = sent.get("max_tokens")
        sent["max_tokens"] = min(bound, given) if isinstance(given, int) else bound
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = response_format["json_schema"].get("schema")
        sent["response_format"] = (
            {"type": "json_object"} if schema is None else {"type": "json_object", "schema": schema}
        )
    if path == EMBEDDINGS_PATH:
        sent.pop("encoding_format", None)
    return sent
