"""LangChain and the OpenAI Agents SDK against one of FICC's compatible base URLs.

Run by the clients' own venv (requirements/clients.txt), never FICC's: ``python clients.py
'<json>'`` with ``{scenario, base_url, api_key, model, max_tokens, prompt}``. It prints one JSON
line with what the client got, so the test compares it with what FICC answered.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


def langchain(request: dict[str, Any]) -> dict[str, Any]:
    """ChatOpenAI plain, then streamed with ``stream_usage=True`` (the usage chunk read)."""
    from langchain_openai import ChatOpenAI

    def chat(**options: Any) -> Any:
        return ChatOpenAI(
            base_url=request["base_url"],
            api_key=request["api_key"],
            model=request["model"],
            temperature=0,
            max_tokens=request["max_tokens"],
            max_retries=0,
            timeout=60,
            **options,
        )

    plain = chat().invoke(request["prompt"])
    total = None
    for chunk in chat(stream_usage=True).stream(request["prompt"]):
        total = chunk if total is None else total + chunk
    assert total is not None
    return {
        "plain": {
            "content": plain.content,
            "usage": plain.usage_metadata,
            "finish_reason": plain.response_metadata.get("finish_reason"),
        },
        "streamed": {
            "content": total.content,
            "usage": total.usage_metadata,
            "finish_reason": total.response_metadata.get("finish_reason"),
        },
    }


def agents(request: dict[str, Any]) -> dict[str, Any]:
    """``Runner.run`` on an Agent whose model is OpenAIResponsesModel on the base URL."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    async def run() -> dict[str, Any]:
        client = AsyncOpenAI(
            base_url=request["base_url"], api_key=request["api_key"], max_retries=0, timeout=60
        )
        agent = Agent(
            name="assistant",
            instructions="Answer briefly.",
            model=OpenAIResponsesModel(model=request["model"], openai_client=client),
            model_settings=ModelSettings(temperature=0, max_tokens=request["max_tokens"]),
        )
        result = await Runner.run(agent, request["prompt"])
        usage = result.context_wrapper.usage
        (response,) = result.raw_responses
        return {
            "final_output": result.final_output,
            "response_id": response.response_id,
            "usage": {
                "requests": usage.requests,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
            },
        }

    return asyncio.run(run())


SCENARIOS = {"langchain": langchain, "agents": agents}


def main() -> None:
    request = json.loads(sys.argv[1])
    print(json.dumps(SCENARIOS[request["scenario"]](request)))


if __name__ == "__main__":
    main()
