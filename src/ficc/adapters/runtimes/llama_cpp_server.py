"""``python -m ficc.adapters.runtimes.llama_cpp_server --listen_fd FD [server flags]``

llama-cpp-python's OpenAI-compatible server, serving on a socket FICC bound to its port and
handed over: the engine never binds a port of its own, so no other local process can take the
port between FICC choosing it and the engine listening (and receive the engine's prompts).
The flags are llama-cpp-python's own (``python -m llama_cpp.server --help``).

Before it reads the model the engine confines itself with Landlock (:mod:`.landlock`): it may
read Python, the system's libraries and the model file, use devices, and nothing else (not
FICC's state directory, nor its configuration), and may open no new TCP connection. This module
runs in the engine's process only; FICC's process never imports llama_cpp.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import Final

import ficc
from ficc.adapters.runtimes import landlock

SYSTEM_READ: Final = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/proc", "/sys")
SYSTEM_FILES: Final = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/passwd",
    "/etc/group",
    "/etc/os-release",
    "/etc/mime.types",
)
"""What of /etc an engine reads; the rest of /etc (FICC's configuration among it) stays shut."""


def engine_read_paths() -> list[Path]:
    """Python (its prefixes, where the engine's packages live) and FICC's package, the
    system's libraries, /proc and /sys (CPU topology)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return sorted({*map(Path, prefixes), Path(ficc.__file__).parent, *map(Path, SYSTEM_READ)})


def confine_engine(model: Path) -> int:
    """Confine this process to what an engine serving ``model`` needs; the Landlock version
    used, 0 where the kernel has none."""
    return landlock.confine(
        read=engine_read_paths(),
        devices=[Path("/dev")],
        read_files=[model, *map(Path, SYSTEM_FILES)],
    )


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
    if version := confine_engine(Path(given["model"])):
        print(f"INFO:     Confined by Landlock {version}: no access to FICC's files", flush=True)
    else:
        print("WARNING:  This kernel has no Landlock: the engine runs unconfined", flush=True)
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
