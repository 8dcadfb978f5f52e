"""``python -m ficc.adapters.runtimes.llama_cpp_server --listen_fd FD [server flags]``

llama-cpp-python's OpenAI-compatible server, serving on a socket FICC bound to its port and
handed over: the engine never binds a port of its own, so no other local process can take the
port between FICC choosing it and the engine listening (and receive the engine's prompts).
The flags are llama-cpp-python's own (``python -m llama_cpp.server --help``). This module runs
in the engine's process only; FICC's process never imports llama_cpp.
"""

from __future__ import annotations

import argparse
import socket
import sys


def main(argv: list[str]) -> None:
    """Build llama-cpp-python's app from its flags, then serve it on the inherited socket."""
    handed = argparse.ArgumentParser(add_help=False)
    handed.add_argument("--listen_fd", type=int, required=True)
    listen, flags = handed.parse_known_args(argv)

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog="llama_cpp_server")
    add_args_from_model(parser, Settings)
    given = {
        key: value for key, value in vars(parser.parse_args(flags)).items() if value is not None
    }
    app = create_app(
        server_settings=ServerSettings(
            **{key: value for key, value in given.items() if key in ServerSettings.model_fields}
        ),
        model_settings=[
            ModelSettings(
                **{key: value for key, value in given.items() if key in ModelSettings.model_fields}
            )
        ],
    )
    listener = socket.socket(fileno=listen.listen_fd)
    host, port = listener.getsockname()[:2]
    # Uvicorn names no address for sockets it is given: the log says where requests go.
    print(f"INFO:     Serving on http://{host}:{port} (a socket FICC bound)", flush=True)
    uvicorn.Server(uvicorn.Config(app)).run(sockets=[listener])


if __name__ == "__main__":
    main(sys.argv[1:])
