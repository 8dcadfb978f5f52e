"""Usage for engines that stream none (llama.cpp's server): counted by the engine itself."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from ficc.adapters.engines.sse import UsageCounter
from ficc.base.errors import FiccError
from ficc.domain.openai_answers import assemble_chat_completion, assemble_text_completion
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH

LLAMA_CPP_COUNT_PATH: Final = "/extras/tokenize/count"
"""llama.cpp's server counts the tokens of a text with the model's own tokenizer here."""
USAGE_PROBE_MAX_TOKENS: Final = 1
"""The prompt of a plain probe is the prompt just generated from: the engine's cache answers it."""
PROBE_DROPPED_FIELDS: Final = frozenset(
    {"stream", "stream_options", "logprobs", "top_logprobs", "n", "max_completion_tokens"}
)

PROBE_DEADLINE_SECONDS: Final = 10.0
"""The plain request that asks why a stream ended empty: a refusal comes before any token."""

PostJson = Callable[[str, Mapping[str, Any]], Awaitable[Any]]
"""POSTs a small JSON body to a path of the engine and answers its decoded JSON (a FiccError
where the engine cannot be reached or refuses, ValueError where the answer is no JSON)."""


class UsageProbe:
    """Counts a finished stream's usage by asking the engine, for one engine client."""

    def __init__(self, post_json: PostJson, model: str | None) -> None:
        self._post_json = post_json
        self._model = model
        self._empty_text_tokens: int | None = None

    async def counted(
        self, path: str, body: Mapping[str, Any], chunks: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Usage as the engine reports it for the same request made plainly; None if unknown.

        llama.cpp's server streams no usage. Its prompt count comes from a plain probe of the
        same request limited to one token (the prompt is in the engine's cache by now); its
        completion count is ``max_tokens`` for an answer cut by the limit, else the tokens of
        the answer's text by the engine's tokenizer. An engine without either answers None.
        """
        try:
            prompt_tokens = await self._prompt_tokens(path, body)
            completion_tokens = 0
            for text, finish_reason in _answer_texts(path, chunks):
                max_tokens = body.get("max_tokens")
                if finish_reason == "length" and isinstance(max_tokens, int):
                    completion_tokens += max_tokens
                else:
                    completion_tokens += await self._token_count(text)
        except (FiccError, ValueError, KeyError, TypeError):
            return None
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def counter(self, path: str, body: Mapping[str, Any]) -> UsageCounter:
        """Counts the usage of one streamed request of ``body`` to ``path``."""
        return functools.partial(self.counted, path, body)

    async def _prompt_tokens(self, path: str, body: Mapping[str, Any]) -> int:
        probe = plain_probe(body, self._model)
        return _count((await self._post_json(path, probe))["usage"]["prompt_tokens"])

    async def _token_count(self, text: str) -> int:
        """Tokens of ``text`` alone: the tokenizer's count less the BOS it may add."""
        if self._empty_text_tokens is None:
            self._empty_text_tokens = await self._tokenizer_count("")
        if not text:
            return 0
        return await self._tokenizer_count(text) - self._empty_text_tokens

    async def tokenizer_count(self, text: str) -> int:
        """The tokenizer's count of ``text`` (a BOS it adds included: never below the truth)."""
        return await self._tokenizer_count(text)

    async def _tokenizer_count(self, text: str) -> int:
        return _count((await self._post_json(LLAMA_CPP_COUNT_PATH, {"input": text}))["count"])


def plain_probe(body: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """A streamed request's body as a plain request for one token: the engine's answer to it
    tells the prompt's tokens, or why the request is refused."""
    probe = {k: v for k, v in body.items() if k not in PROBE_DROPPED_FIELDS}
    probe.update(max_tokens=USAGE_PROBE_MAX_TOKENS, stream=False)
    if model is not None:
        probe["model"] = model
    return probe


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("the engine's count is not a whole number")
    return value


def _answer_texts(path: str, chunks: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Each choice's generated text (tool calls included) and its finish reason."""
    if path != CHAT_COMPLETIONS_PATH:
        answer = assemble_text_completion(chunks)
        return [(str(c["text"]), c["finish_reason"]) for c in answer["choices"]]
    answer = assemble_chat_completion(chunks)
    texts = []
    for choice in answer["choices"]:
        message = choice["message"]
        calls = message.get("tool_calls") or []
        text = (message["content"] or "") + "".join(
            str(call.get("function", {}).get("arguments", "")) for call in calls
        )
        texts.append((text, choice["finish_reason"]))
    return texts
