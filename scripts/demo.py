"""The two-cluster walk-through: pair, grant, discover, chat remotely, acquire a model.

Run it with `make demo`. Both clusters run on this machine, bound to loopback, each with its
own state directory under a temporary folder that is removed at the end. Every step is a
`ficc` command, the same a person types (see the README's tours), so the demo shows the
product's interface rather than its HTTP routes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FICC = [sys.executable, "-m", "ficc"]


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def ficc(state: Path, *args: str, stdin: str | None = None, show: bool = False) -> Any:
    result = subprocess.run(
        [*FICC, *args, "--state-dir", str(state)],
        input=stdin,
        capture_output=not show,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"ficc {' '.join(args)} failed:\n{result.stderr}")
    return (
        None
        if show
        else json.loads(result.stdout)
        if result.stdout.strip().startswith(("{", "["))
        else result.stdout.strip()
    )


def flags(flag: str, values: list[str]) -> list[str]:
    """``--flag v1 --flag v2 ...`` for a repeatable option."""
    return [argument for value in values for argument in (flag, value)]


def serve(state: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *FICC,
                "serve",
                "--state-dir",
                str(state),
                "--listen",
                "127.0.0.1:0",
                "--hypernet-bind",
                "127.0.0.1:0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while not (state / "server.json").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"ficc serve did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return process


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="ficc-demo-"))
    alpha, beta = root / "alpha", root / "beta"
    processes = []
    try:
        say("Two clusters: alpha (requester) and beta (has a GPU-less inference service)")
        processes = [serve(alpha, root / "alpha.log"), serve(beta, root / "beta.log")]
        alpha_url = json.loads((alpha / "server.json").read_text())["url"]

        say("beta imports the example model and starts a llama.cpp service")
        example = ficc(beta, "example-model")
        model = ficc(beta, "model-add", "--name", "smollm2", example)["id"]
        service = ficc(
            beta,
            "service-create",
            "--name",
            "smollm2",
            "--model",
            model,
            "--runtime",
            "llama.cpp",
        )["id"]
        started = ficc(beta, "service-start", service, "--wait")
        print(f"model {model}\nservice {service} {started['state']}")

        say("Both companions start their HyperNet endpoints")
        for cluster, label in ((alpha, "alpha"), (beta, "beta")):
            ficc(
                cluster,
                "federation-configure",
                "--agent-directory",
                str(root / f"{label}-agent"),
                "--label",
                label,
            )
        identity = ficc(beta, "federation-status")["identity"]
        print(f"beta's HyperNet ID {identity['hypernet_id']}")

        say("alpha asks beta for access (an offer)")
        scopes = ["discover", "inference:invoke", "models:read", "models:transfer"]
        offer = ficc(
            alpha,
            "federation-pair",
            "--service",
            identity["hypernet_id"],
            "--ticket",
            identity["ticket"],
            *flags("--scope", scopes),
        )
        print(f"offer {offer['id']}: {offer['state']}")

        say("beta approves with an exact, limited grant and signs a receipt")
        approved = ficc(
            beta,
            "federation-approve",
            offer["id"],
            "--yes",
            *flags("--scope", scopes),
            "--service",
            service,
            "--model",
            model,
            "--concurrent",
            "2",
            "--transfer-bytes",
            str(200 * 1024 * 1024),
        )
        print(f"grant {approved['receipt']['grant']}, receipt {approved['receipt']['digest']}")

        say("alpha checks the receipt and finishes the pairing")
        finished = ficc(
            alpha, "federation-finish", offer["id"], "--receipt", approved["receipt"]["digest"]
        )
        peer = finished["peer"]["id"]
        print(f"alpha knows beta as peer {peer}; beta knows alpha as peer {approved['peer']}")

        say("alpha discovers what beta shares")
        discovered = ficc(
            alpha,
            "federation-request",
            peer,
            "--input",
            "-",
            stdin=json.dumps({"operation": "discover", "body": {}}),
        )
        print(json.dumps(discovered["result"], indent=2))

        say("A chat completion on beta's engine, asked on alpha")
        print(
            f"(any OpenAI client: {alpha_url}/api/v1/federation/peers/{peer}/v1, model {service})"
        )
        ficc(
            alpha,
            "chat",
            "--peer",
            peer,
            service,
            "What is the capital of France?",
            "--max-tokens",
            "48",
            "--temperature",
            "0",
            show=True,
        )

        say("alpha acquires beta's model: verified, resumable, within the allowance")
        ficc(alpha, "federation-acquire", peer, model, "--deadline", "600", show=True)
        print(json.dumps(ficc(alpha, "models")["models"][0]["provenance"], indent=2))
        say("Done. Every step is in each cluster's audit log (ficc federation-audit).")
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        if os.environ.get("FICC_DEMO_KEEP") != "1":
            subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    main()
