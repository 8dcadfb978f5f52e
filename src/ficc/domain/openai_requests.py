"""OpenAI request bodies, checked as OpenAI checks them, before anything reaches an engine.

Pure rules, no I/O. Both compatible URLs and the grantor serving a peer's ``inference.invoke``
run the same two steps: :func:`parse_request_body` (size bounded before the JSON decoder runs,
whose own recursion bound stops a body nested past it) and :func:`check_request` (the nesting
depth of the decoded value, then types and ranges of the parameters FICC knows). A refusal is an
``InvalidInput`` whose ``field`` is the parameter, which the web layer renders as OpenAI's
``param``. Parameters FICC does not know pass through untouched.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from ficc.base.errors import InvalidInput, TooLarge
from ficc.base.units import MiB

CHAT_COMPLETIONS_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
EMBEDDINGS_PATH: Final = "/v1/embeddings"
INFERENCE_PATHS: Final = frozenset({CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH})

MAX_REQUEST_BYTES: Final = 1 * MiB
"""The web layer's body limit: a bigger body never reaches the decoder."""

MAX_NESTING_DEPTH: Final = 64
"""Objects and arrays inside each other; a chat with tools and JSON schemas uses about ten."""

MAX_CHOICES: Final = 128
"""OpenAI's maximum ``n``."""

MAX_STOP_SEQUENCES: Final = 4
MAX_TOP_LOGPROBS: Final = 20
MAX_COMPLETION_LOGPROBS: Final = 5
MAX_LOGIT_BIAS: Final = 100

MAX_EMBEDDING_INPUTS: Final = 2048
"""OpenAI's maximum number of inputs in one embeddings request."""
EMBEDDING_FORMATS: Final = frozenset({"float", "base64"})

MESSAGE_ROLES: Final = frozenset({"system", "user", "assistant", "tool", "developer", "function"})
RESPONSE_FORMATS: Final = frozenset({"text", "json_object", "json_schema"})
TOOL_CHOICES: Final = frozenset({"none", "auto", "required"})

_TOKEN_ID = re.compile(r"^(0|[1-9][0-9]{0,9})$")


def _too_deep() -> InvalidInput:
    return InvalidInput(
        f"the request body nests objects and arrays deeper than {MAX_NESTING_DEPTH} levels",
        field="body",
    )


def _invalid(param: str, rule: str) -> InvalidInput:
    return InvalidInput(f"Invalid '{param}': {rule}", field=param)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def value_depth_exceeds(value: Any, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether an already decoded value nests deeper than ``limit``; walked a level at a time,
    containers only, without recursion."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below += [child for child in children if isinstance(child, dict | list)]
        level = below
    return False


def parse_request_body(raw: bytes, *, max_bytes: int = MAX_REQUEST_BYTES) -> dict[str, Any]:
    """The JSON object of a request body: size, then syntax, then the shape.

    The nesting depth is :func:`check_request`'s (every caller runs it next, on the decoded
    value: a walk of its containers, far cheaper than a scan of the text); a body nested past
    the decoder's own recursion bound is refused here with the same words, the decoder having
    stopped at that bound without building it.
    """
    if len(raw) > max_bytes:
        raise TooLarge(
            f"the request body is {len(raw)} bytes; at most {max_bytes} are accepted",
            field="body",
            details={"limit": "body_bytes", "max_bytes": max_bytes},
        )
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise _too_deep() from exc
    except ValueError as exc:
        raise InvalidInput("the request body is not valid JSON", field="body") from exc
    if not isinstance(value, dict):
        raise InvalidInput("the request body must be a JSON object", field="body")
    return value


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return _is_integer(value)


def _integer(body: Mapping[str, Any], param: str, low: int, high: int | None = None) -> None:
    value = body.get(param)
    if value is None:
        return
    if not _is_integer(value):
        raise _invalid(param, f"expected an integer, but got {type(value).__name__} instead")
    if value < low:
        raise _invalid(param, f"integer below minimum value; expected >= {low}, got {value}")
    if high is not None and value > high:
        raise _invalid(param, f"integer above maximum value; expected <= {high}, got {value}")


def _number(body: Mapping[str, Any], param: str, low: float, high: float) -> None:
    value = body.get(param)
    if value is None:
        return
    if not _is_number(value):
        raise _invalid(param, f"expected a number, but got {type(value).__name__} instead")
    if not low <= value <= high:
        raise _invalid(param, f"number out of range; expected {low:g} to {high:g}, got {value}")


def _boolean(body: Mapping[str, Any], param: str) -> None:
    value = body.get(param)
    if value is not None and not isinstance(value, bool):
        raise _invalid(param, f"expected a boolean, but got {type(value).__name__} instead")


def _string(body: Mapping[str, Any], param: str) -> None:
    value = body.get(param)
    if value is not None and not isinstance(value, str):
        raise _invalid(param, f"expected a string, but got {type(value).__name__} instead")


def _object(body: Mapping[str, Any], param: str, rule: str) -> dict[str, Any] | None:
    """An optional object parameter: None when absent, refused with ``rule`` when not an object."""
    value = body.get(param)
    if value is not None and not isinstance(value, dict):
        raise _invalid(param, rule)
    return value


def _stream_options(body: Mapping[str, Any]) -> None:
    options = _object(body, "stream_options", "expected an object")
    if options is None:
        return
    if body.get("stream") is not True:
        raise _invalid("stream_options", "only allowed when 'stream' is true")
    usage = options.get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise _invalid("stream_options.include_usage", "expected a boolean")


def _stop(body: Mapping[str, Any]) -> None:
    stop = body.get("stop")
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or not all(isinstance(item, str) for item in stop):
        raise _invalid("stop", "expected a string or an array of strings")
    if len(stop) > MAX_STOP_SEQUENCES:
        raise _invalid("stop", f"array too long; expected at most {MAX_STOP_SEQUENCES} strings")


def _logit_bias(body: Mapping[str, Any]) -> None:
    bias = _object(body, "logit_bias", "expected an object of token IDs to numbers")
    if bias is None:
        return
    for token, value in bias.items():
        if not _TOKEN_ID.match(token):
            raise _invalid("logit_bias", f"the key {token[:40]!r} is not a token ID")
        if not _is_number(value) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
            raise _invalid(
                "logit_bias",
                f"the bias of token {token} must be a number from "
                f"-{MAX_LOGIT_BIAS} to {MAX_LOGIT_BIAS}",
            )


def _messages(body: Mapping[str, Any]) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "expected a non-empty array of messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise _invalid(where, "expected an object")
        role = message.get("role")
        if not isinstance(role, str) or role not in MESSAGE_ROLES:
            allowed = ", ".join(sorted(MESSAGE_ROLES))
            raise _invalid(f"{where}.role", f"expected one of {allowed}")
        content = message.get("content")
        if content is None and role == "assistant":
            continue
        if not isinstance(content, str | list):
            raise _invalid(f"{where}.content", "expected a string or an array of content parts")
        if isinstance(content, list) and not all(isinstance(part, dict) for part in content):
            raise _invalid(f"{where}.content", "each content part must be an object")


def _prompt(body: Mapping[str, Any]) -> None:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(item, str) for item in prompt):
            return
        if all(_is_integer(item) for item in prompt):
            return
        if all(isinstance(item, list) and all(map(_is_integer, item)) for item in prompt):
            return
    raise _invalid(
        "prompt", "expected a string, an array of strings, or an array of token ID arrays"
    )


def _chat_options(body: Mapping[str, Any]) -> None:
    _messages(body)
    _boolean(body, "logprobs")
    _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if body.get("top_logprobs") is not None and body.get("logprobs") is not True:
        raise _invalid("top_logprobs", "only allowed when 'logprobs' is true")
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict)
        or not isinstance(response_format.get("type"), str)
        or response_format["type"] not in RESPONSE_FORMATS
    ):
        allowed = ", ".join(sorted(RESPONSE_FORMATS))
        raise _invalid("response_format", f"expected an object whose type is one of {allowed}")
    if response_format is not None and response_format["type"] == "json_schema":
        _json_schema(response_format.get("json_schema"))
    tools = body.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools)
    ):
        raise _invalid("tools", "expected an array of tool objects")
    tool_choice = body.get("tool_choice")
    if (
        tool_choice is not None
        and not isinstance(tool_choice, dict)
        and (not isinstance(tool_choice, str) or tool_choice not in TOOL_CHOICES)
    ):
        raise _invalid("tool_choice", "expected none, auto, required or a tool object")


def _json_schema(value: Any) -> None:
    """OpenAI's ``json_schema`` format: a named schema (the schema itself may be omitted)."""
    param = "response_format.json_schema"
    if not isinstance(value, dict):
        raise _invalid(param, "expected an object with a name and a schema")
    if not isinstance(value.get("name"), str) or not value["name"]:
        raise _invalid(f"{param}.name", "expected a non-empty string")
    if value.get("schema") is not None and not isinstance(value["schema"], dict):
        raise _invalid(f"{param}.schema", "expected a JSON schema object")


def _embedding_options(body: Mapping[str, Any]) -> None:
    value = body.get("input")
    rule = "expected a non-empty string, array of strings, or array of token ID arrays"
    if isinstance(value, str):
        if not value:
            raise _invalid("input", rule)
    elif not isinstance(value, list) or not value:
        raise _invalid("input", rule)
    elif len(value) > MAX_EMBEDDING_INPUTS:
        raise _invalid("input", f"array too long; expected at most {MAX_EMBEDDING_INPUTS} inputs")
    elif not (
        all(isinstance(item, str) and item for item in value)
        or all(_is_integer(item) for item in value)
        or all(isinstance(item, list) and item and all(map(_is_integer, item)) for item in value)
    ):
        raise _invalid("input", rule)
    if body.get("stream") is True:
        raise _invalid("stream", "embeddings are answered whole, never streamed")
    encoding = body.get("encoding_format")
    if encoding is not None and (
        not isinstance(encoding, str) or encoding not in EMBEDDING_FORMATS
    ):
        raise _invalid("encoding_format", "expected float or base64")
    _integer(body, "dimensions", 1)


def _completion_options(body: Mapping[str, Any]) -> None:
    _prompt(body)
    _integer(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    _boolean(body, "echo")
    _string(body, "suffix")
    _integer(body, "best_of", 1, MAX_CHOICES)


def check_request(path: str, body: Mapping[str, Any]) -> None:
    """Refuse a body OpenAI would refuse, naming the parameter; other fields are not looked at.

    ``path`` is the engine path the body is for (chat, legacy completions or embeddings).
    """
    if value_depth_exceeds(body):
        raise _too_deep()
    _string(body, "model")
    _boolean(body, "stream")
    _stream_options(body)
    _integer(body, "max_tokens", 1)
    _integer(body, "max_completion_tokens", 1)
    _integer(body, "n", 1, MAX_CHOICES)
    _number(body, "temperature", 0, 2)
    _number(body, "top_p", 0, 1)
    _number(body, "presence_penalty", -2, 2)
    _number(body, "frequency_penalty", -2, 2)
    _integer(body, "seed", -(2**63), 2**63 - 1)
    _string(body, "user")
    _stop(body)
    _logit_bias(body)
    if path == CHAT_COMPLETIONS_PATH:
        _chat_options(body)
    elif path == COMPLETIONS_PATH:
        _completion_options(body)
    elif path == EMBEDDINGS_PATH:
        _embedding_options(body)
    else:
        raise InvalidInput(f"the path {path!r} is not an OpenAI inference path", field="path")


def usage_requested(body: Mapping[str, Any]) -> bool:
    """Whether a streamed request asked for a final usage chunk."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
