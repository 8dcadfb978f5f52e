"""The ``llama.cpp`` runtime: llama-cpp-python's OpenAI-compatible server, one per replica.

Flags fixed by what was measured (docs: engine.md): ``--interrupt_requests false`` because the
default cuts a running stream short when another request arrives; one thread unless the spec
asks for more; loopback only, on a socket FICC binds to a free port and hands over
(:mod:`ficc.adapters.runtimes.llama_cpp_server`), so no other process can take the port first.
"""

from __future__ import annotations

import importlib.util
from typing import Final

from ficc.adapters.runtimes.supervised import (
    SupervisedRuntime,
    local_node_reasons,
    python_module_command,
)
from ficc.domain.inference import DEFAULT_LLAMA_CPP_THREADS, RuntimeName
from ficc.services.ports.runtimes import Availability, LaunchRequest, NodeInfo

SERVER_MODULE: Final = "llama_cpp.server"
HANDED_SOCKET_SERVER_MODULE: Final = "ficc.adapters.runtimes.llama_cpp_server"
"""The same server, serving on a socket it inherits."""
_PASSED_OPTIONS: Final = ("n_ctx", "n_batch", "n_gpu_layers", "seed")


def llama_cpp_installed() -> bool:
    """Whether llama-cpp-python is installed; found without importing (that loads the library)."""
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaCppRuntime(SupervisedRuntime):
    """Runs GGUF models through llama-cpp-python's server on this node."""

    takes_bound_socket = True

    @property
    def name(self) -> RuntimeName:
        """``llama.cpp``."""
        return RuntimeName.LLAMA_CPP

    async def availability(self, node: NodeInfo) -> Availability:
        """Local node only, with llama-cpp-python installed in FICC's environment."""
        reasons = local_node_reasons(node)
        if not llama_cpp_installed():
            reasons.append(
                "llama-cpp-python is not installed (pip install 'llama-cpp-python[server]')"
            )
        return Availability(tuple(reasons))

    def api_key_environment(self, api_key: str) -> dict[str, str]:
        """llama-cpp-python's server reads ``API_KEY`` (pydantic settings) like ``--api_key``."""
        return {"API_KEY": api_key}

    def command(self, request: LaunchRequest, port: int, listen_fd: int | None = None) -> list[str]:
        """The server's flags; the model's file and the name it answers to come from the request.

        With ``listen_fd`` the server serves on that inherited socket (bound to ``port``)."""
        assert request.model_path is not None
        threads = int(request.options.get("n_threads", DEFAULT_LLAMA_CPP_THREADS))
        arguments = [
            "--model",
            str(request.model_path),
            "--model_alias",
            request.model_name,
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--interrupt_requests",
            "false",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        for option in _PASSED_OPTIONS:
            if option in request.options:
                arguments += [f"--{option}", str(request.options[option])]
        if request.options.get("embeddings") is True:
            arguments += ["--embedding", "true"]
        if listen_fd is not None:
            arguments = ["--listen_fd", str(listen_fd), *arguments]
            return python_module_command(self._python, HANDED_SOCKET_SERVER_MODULE, arguments)
        return python_module_command(self._python, SERVER_MODULE, arguments)
