"""An engine runs where FICC does not exist for it, and confines itself with Landlock before
it reads a model: FICC's files, socket, process and network stay shut.

Run on the real kernel, in a child process (a confinement cannot be undone): it applies the
very rules an engine applies, then tries what an exploited model parser would try.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ficc
from ficc.adapters.runtimes import landlock
from ficc.adapters.runtimes.sandbox import EngineSandbox

ATTEMPTS = """
import json, socket, sys
from pathlib import Path
from ficc.adapters.runtimes.llama_cpp_server import confine_engine

model, secret, config = map(Path, sys.argv[1:4])
seen = {"version": confine_engine(model)}

def attempt(name, action):
    try:
        action()
        seen[name] = "allowed"
    except PermissionError:
        seen[name] = "denied"

attempt("read the model", model.read_bytes)
attempt("read the state directory", secret.read_bytes)
attempt("list the state directory", lambda: list(secret.parent.iterdir()))
attempt("read FICC's configuration", config.read_bytes)
attempt("write beside the model", lambda: (model.parent / "dropped").write_text("x"))
attempt("connect over TCP", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
attempt("import more of the standard library", lambda: __import__("xml.dom.minidom"))
attempt("open /dev/null", lambda: open("/dev/null", "rb").read())
print(json.dumps(seen))
"""


def test_an_engine_reads_its_model_and_nothing_of_ficcs(tmp_path: Path) -> None:
    model = tmp_path / "blobs" / "model.gguf"
    secret = tmp_path / "state" / "cluster.key"
    config = tmp_path / "etc" / "ficc.toml"
    for path, text in ((model, "GGUF"), (secret, "secret"), (config, "database_url = 'x'")):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-c", ATTEMPTS, str(model), str(secret), str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen.pop("version") == landlock.abi_version() > 0
    assert seen == {
        "read the model": "allowed",
        "read the state directory": "denied",
        "list the state directory": "denied",
        "read FICC's configuration": "denied",
        "write beside the model": "denied",
        "connect over TCP": "denied",
        "import more of the standard library": "allowed",
        "open /dev/null": "allowed",
    }
    assert secret.read_text() == "secret"  # this process was never confined


ESCAPES = """
import json, os, signal, socket, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])  # this FICC's sources (-I keeps PYTHONPATH out)
from ficc.adapters.runtimes.llama_cpp_server import confine_engine

state, model = Path(sys.argv[2]), Path(sys.argv[3])
tcp_port, udp_port, ficc_pid = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[7])
abstract = sys.argv[6]
if sys.argv[8] == "landlock":
    confine_engine(model)
seen = {}

def attempt(name, action):
    try:
        action()
        seen[name] = "allowed"
    except OSError:
        seen[name] = "denied"

def connect(family, kind, address):
    with socket.socket(family, kind) as sock:
        sock.settimeout(2)
        sock.connect(address)

def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"escaped", ("127.0.0.1", udp_port))

def udp6():
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK) as sock:
        sock.sendto(b"escaped", ("::1", udp_port))

def io_uring():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(425, 8, ctypes.create_string_buffer(120)) < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")

def environ():
    if b"FICC_SECRET" not in Path(f"/proc/{ficc_pid}/environ").read_bytes():
        raise PermissionError("not FICC's environment")

attempt("read the model", model.read_bytes)
attempt("read D/owner.token", (state / "owner.token").read_bytes)
attempt("read D/cluster.key", (state / "cluster.key").read_bytes)
unix, tcp = (socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_STREAM)
attempt("connect to D/ficc.sock", lambda: connect(*unix, str(state / "ficc.sock")))
attempt("TCP connect to a loopback listener", lambda: connect(*tcp, ("127.0.0.1", tcp_port)))
attempt("UDP sendto a loopback listener", udp)
attempt("UDP over IPv6, flags in the type", udp6)
attempt("io_uring_setup (sockets past seccomp)", io_uring)
attempt("connect to an abstract UNIX socket", lambda: connect(*unix, "\\0" + abstract))
attempt("signal 0 to FICC", lambda: os.kill(ficc_pid, 0))
attempt("SIGSTOP to FICC", lambda: os.kill(ficc_pid, signal.SIGSTOP))
attempt("signal every process it can", lambda: os.kill(-1, signal.SIGSTOP))
attempt("read FICC's /proc environ", environ)
attempt("write beside the model", lambda: (model.parent / "dropped").write_text("x"))
attempt("write in its working directory", lambda: Path("scratch").write_text("x"))
try:
    seen["working directory"] = sorted(os.listdir("."))
except OSError:
    seen["working directory"] = "unreadable"
status = Path("/proc/self/status").read_text().splitlines()
seen["capabilities"] = next(line.split()[1] for line in status if line.startswith("CapEff"))
print(json.dumps(seen))
"""

ALL_REFUSED = {
    "read the model": "allowed",
    "read D/owner.token": "denied",
    "read D/cluster.key": "denied",
    "connect to D/ficc.sock": "denied",
    "TCP connect to a loopback listener": "denied",
    "UDP sendto a loopback listener": "denied",
    "UDP over IPv6, flags in the type": "denied",
    "io_uring_setup (sockets past seccomp)": "denied",
    "connect to an abstract UNIX socket": "denied",
    "signal 0 to FICC": "denied",
    "SIGSTOP to FICC": "denied",
    "signal every process it can": "denied",
    "read FICC's /proc environ": "denied",
    "write beside the model": "denied",
    "write in its working directory": "denied",
    "working directory": "unreadable",
    "capabilities": "0000000000000000",
}
"""A llama.cpp engine (its own network, Landlock's file and TCP rules): every escape refused.
It may not even read or write its (empty, private) working directory."""
SHARED_NETWORK = {
    **ALL_REFUSED,
    "TCP connect to a loopback listener": "allowed",
    "write beside the model": "allowed",  # in its own empty tmpfs: gone when it ends
    "write in its working directory": "allowed",
    "working directory": ["scratch"],
}
"""vLLM and engines on Ray nodes bind their own port, so they share FICC's network: FICC's files,
socket and process still do not exist for them; TCP to loopback does, UDP does not (the seccomp
filter), (docs/security.md)."""


@pytest.fixture
def ficc_like(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A state directory outside /tmp (so it is hidden as the state directory, not as /tmp)
    with FICC's secrets and control socket, loopback TCP and UDP listeners, an abstract UNIX
    socket, and a FICC-like process with a secret in its environment."""
    state = Path(tempfile.mkdtemp(prefix="ficc-sandbox-", dir=Path.home()))
    model = state / "store" / "blobs" / ("a" * 64)
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF")
    (state / "owner.token").write_text("owner")
    (state / "cluster.key").write_text("key")
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.bind(str(state / "ficc.sock"))
    control.listen()
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    abstract = f"ficc-sandbox-{os.getpid()}-{tmp_path.name}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + abstract)
    unix.listen()
    ficc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, "FICC_SECRET": "1"},
    )
    try:
        yield {
            "state": state,
            "model": model,
            "tcp": tcp.getsockname()[1],
            "udp": udp,
            "abstract": abstract,
            "ficc": ficc,
        }
    finally:
        ficc.kill()
        ficc.wait()
        for sock in (control, tcp, udp, unix):
            sock.close()
        shutil.rmtree(state)


@pytest.mark.parametrize(
    ("private_network", "expected"),
    [(True, ALL_REFUSED), (False, SHARED_NETWORK)],
    ids=["llama.cpp", "shared-network"],
)
def test_a_confined_engine_finds_no_way_to_ficc(
    ficc_like: dict[str, Any], private_network: bool, expected: dict[str, object]
) -> None:
    """G1, G13, F16: the very launcher and rules FICC applies; then an exploited engine's
    tries, each refused (the FICC-like process is neither stopped nor read)."""
    assert landlock.abi_version() >= 6  # the scope is part of what is shown
    sandbox = EngineSandbox(hide=(ficc_like["state"],))
    source = str(Path(ficc.__file__).parents[1])
    engine = [sys.executable, "-I", "-c", ESCAPES, source, str(ficc_like["state"])]
    engine += [
        str(ficc_like["model"]),
        str(ficc_like["tcp"]),
        str(ficc_like["udp"].getsockname()[1]),
    ]
    engine += [ficc_like["abstract"], str(ficc_like["ficc"].pid)]
    engine.append("landlock" if private_network else "none")
    run = subprocess.run(
        sandbox.command(engine, reveal=[ficc_like["model"]], private_network=private_network),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == expected
    received = []
    with contextlib.suppress(BlockingIOError):
        received.append(ficc_like["udp"].recv(64))
    assert received == []
    stat = Path(f"/proc/{ficc_like['ficc'].pid}/stat").read_text()
    assert stat[stat.rindex(")") + 2] == "S"  # asleep, not stopped
    assert ficc_like["ficc"].poll() is None
    assert (ficc_like["state"] / "cluster.key").read_text() == "key"
    assert not (ficc_like["model"].parent / "dropped").exists()


SEES = """
import json, os, sys
from pathlib import Path
checkout = Path(sys.argv[1])
print(json.dumps({
    "launcher": (checkout / "src/ficc/adapters/runtimes/landlock.py").is_file(),
    "state": (checkout / ".ficc").exists(),
    "beside": sorted(os.listdir(checkout)),
    "stray": (checkout.parent / "stray").exists(),
}))
"""


def test_a_checkout_under_tmp_still_runs_its_engines_with_its_state_hidden(tmp_path: Path) -> None:
    """FICC cloned under /tmp (as a CI clone may be): /tmp is hidden from engines, but the
    interpreter's installation and FICC's package are bound back, read-only, so the launcher
    and the engine run; the state directory beside them, and anything else of /tmp, stay gone."""
    checkout = tmp_path / "checkout"
    shutil.copytree(Path(ficc.__file__).parent, checkout / "src" / "ficc")
    state = checkout / ".ficc"
    state.mkdir()
    (state / "owner.token").write_text("owner")
    (tmp_path / "stray").write_text("x")
    launcher = checkout / "src/ficc/adapters/runtimes/sandbox.py"
    confined = [sys.executable, "-I", "-c", SEES, str(checkout)]
    run = subprocess.run(
        [
            sys.executable,
            "-I",
            str(launcher),
            f"--hide={state}",
            "--network=private",
            "--",
            *confined,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "launcher": True,
        "state": False,
        "beside": ["src"],
        "stray": False,
    }
