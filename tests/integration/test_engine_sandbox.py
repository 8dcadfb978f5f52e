"""An engine confines itself with Landlock before it reads a model: FICC's files stay shut.

Run on the real kernel, in a child process (a confinement cannot be undone): it applies the
very rules an engine applies, then tries what an exploited model parser would try.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ficc.adapters.runtimes import landlock

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
