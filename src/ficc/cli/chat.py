"""`ficc chat SERVICE [PROMPT]`: an answer streamed as it is generated, local or remote.

The request goes through the control socket to the local OpenAI-compatible URL, or with
``--peer`` to the federated one (the peer's service ID, through the selected grant). Closing
the connection is what cancels a generation, here and on the peer: Ctrl-C during an answer
closes it and returns to the prompt; the session keeps its history until it ends.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import click

from ficc.base.errors import ErrorShape, FiccError, error_from_code, render
from ficc.cli.client import ControlClient
from ficc.cli.exits import handles_errors
from ficc.cli.group import cli, state_options
from ficc.cli.output import chosen_format, show_error

LOCAL_PATH: Final = "/api/v1/inference/v1/chat/completions"
PEER_PATH: Final = "/api/v1/federation/peers/{peer}/v1/chat/completions"
PROMPT: Final = ">>> "
DATA_PREFIX: Final = "data:"
DONE: Final = "[DONE]"


class Conversation:
    """The messages of one session; an answer joins it only once it is complete."""

    def __init__(self, system: str | None) -> None:
        self.messages: list[dict[str, str]] = []
        if system is not None:
            self.messages.append({"role": "system", "content": system})

    def asked(self, prompt: str) -> list[dict[str, str]]:
        return [*self.messages, {"role": "user", "content": prompt}]

    def answered(self, prompt: str, answer: str) -> None:
        self.messages += [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ]


def stream_answer(
    client: ControlClient, path: str, body: dict[str, Any]
) -> Iterator[tuple[str, str | None]]:
    """``(text, finish_reason)`` pieces of the answer, as the server sends them."""
    with client.stream("POST", path, body) as response:
        for line in response.iter_lines():
            if not line.startswith(DATA_PREFIX):
                continue
            data = line[len(DATA_PREFIX) :].strip()
            if data == DONE:
                return
            event = json.loads(data)
            if isinstance(event, dict) and isinstance(event.get("error"), dict):
                raise _stream_error(event["error"])
            for choice in event.get("choices", []):
                delta = choice.get("delta") or {}
                yield str(delta.get("content") or ""), choice.get("finish_reason")


def _stream_error(error: dict[str, Any]) -> FiccError:
    details = error.get("details")
    return error_from_code(
        str(error.get("code") or "internal"),
        str(error.get("message") or "the answer ended with an error"),
        details if isinstance(details, dict) else None,
    )


def answer(
    client: ControlClient, path: str, body: dict[str, Any], *, as_text: bool
) -> tuple[str, str | None]:
    """Stream one answer to stdout (as text) or collect it (for JSON); the whole answer."""
    pieces: list[str] = []
    finish_reason = None
    for text, reason in stream_answer(client, path, body):
        pieces.append(text)
        finish_reason = reason or finish_reason
        if as_text and text:
            sys.stdout.write(text)
            sys.stdout.flush()
    if as_text:
        sys.stdout.write("\n")
        sys.stdout.flush()
    return "".join(pieces), finish_reason


@cli.command("chat")
@state_options
@click.argument("service")
@click.argument("prompt", required=False)
@click.option("--peer", help="Ask the peer's service SERVICE through its grant to us.")
@click.option("--system", help="A system message that opens the conversation.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="At most this many tokens.")
@click.option("--temperature", type=click.FloatRange(min=0, max=2), help="Sampling temperature.")
@handles_errors
def chat(
    state_dir: Path,
    project: str,
    service: str,
    prompt: str | None,
    peer: str | None,
    system: str | None,
    max_tokens: int | None,
    temperature: float | None,
) -> None:
    """Chat with a service; without PROMPT, an interactive session (Ctrl-D ends it)."""
    path = LOCAL_PATH if peer is None else PEER_PATH.format(peer=peer)
    settings: dict[str, Any] = {"model": service, "stream": True}
    if max_tokens is not None:
        settings["max_tokens"] = max_tokens
    if temperature is not None:
        settings["temperature"] = temperature
    conversation = Conversation(system)
    as_text = chosen_format() == "table"
    # No deadline between chunks: a long answer on a slow machine is not an error.
    with ControlClient(state_dir, project, timeout_seconds=None) as client:
        if prompt is not None:
            _one_answer(client, path, settings, conversation, prompt, as_text=as_text)
            return
        _session(client, path, settings, conversation, as_text=as_text)


def _one_answer(
    client: ControlClient,
    path: str,
    settings: dict[str, Any],
    conversation: Conversation,
    prompt: str,
    *,
    as_text: bool,
) -> None:
    body = {**settings, "messages": conversation.asked(prompt)}
    reply, finish_reason = answer(client, path, body, as_text=as_text)
    conversation.answered(prompt, reply)
    if not as_text:
        shown = {"model": settings["model"], "reply": reply, "finish_reason": finish_reason}
        click.echo(json.dumps(shown, sort_keys=True))


def _session(
    client: ControlClient,
    path: str,
    settings: dict[str, Any],
    conversation: Conversation,
    *,
    as_text: bool,
) -> None:
    """Read prompts until end of input; Ctrl-C cancels the answer being generated only."""
    interactive = sys.stdin.isatty()
    while True:
        try:
            prompt = input(PROMPT if interactive else "")
        except EOFError:
            if interactive:
                sys.stdout.write("\n")
            return
        except KeyboardInterrupt:
            # At the prompt, as in Python's REPL: a fresh prompt, the session goes on.
            sys.stdout.write("\n")
            continue
        if not prompt.strip():
            continue
        try:
            _one_answer(client, path, settings, conversation, prompt, as_text=as_text)
        except KeyboardInterrupt:
            # The stream's connection is closed on the way out: the server cancels it.
            sys.stdout.write("\n")
            click.echo(
                json.dumps({"cancelled": True, "message": "answer cancelled; ask again"}), err=True
            )
        except FiccError as exc:
            if not interactive:
                raise
            show_refusal(exc)


def show_refusal(error: FiccError) -> None:
    """In an interactive session a refused question is shown, and the session goes on."""
    show_error(render(error, ErrorShape.FICC))
