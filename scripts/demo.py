"""The two-cluster walk-through: pair, grant, discover, chat remotely, acquire a model.

Run it with `make demo`. Both clusters run on this machine, bound to loopback, each with its
own state directory under a temporary folder that is removed at the end.
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

import httpx

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
        beta_url = json.loads((beta / "server.json").read_text())["url"]
        alpha_url = json.loads((alpha / "server.json").read_text())["url"]
        beta_token = (beta / "owner.token").read_text().strip()
        alpha_token = (alpha / "owner.token").read_text().strip()

        say("beta imports the example model and starts a llama.cpp service")
        example = ficc(beta, "example-model")
        model = ficc(beta, "model-add", "--name", "smollm2", example)["id"]
        beta_api = httpx.Client(
            base_url=beta_url, headers={"Authorization": f"Bearer {beta_token}"}, timeout=60
        )
        service = beta_api.post(
            "/api/v1/inference/services",
            json={"name": "smollm2", "model": model, "runtime": "llama.cpp"},
        ).json()["id"]
        beta_api.post(
            f"/api/v1/inference/services/{service}/control",
            json={"revision": 1, "operation": "start"},
        )
        print(f"model {model}\nservice {service} starting")

        say("Both companions start their HyperNet endpoints")
        ficc(
            alpha,
            "federation-configure",
            "--agent-directory",
            str(alpha / "agent"),
            "--label",
            "alpha",
        )
        identity = ficc(
            beta,
            "federation-configure",
            "--agent-directory",
            str(beta / "agent"),
            "--label",
            "beta",
        )["identity"]
        print(f"beta's HyperNet ID {identity['hypernet_id']}")

        say("alpha asks beta for access (an offer)")
        offer = ficc(
            alpha,
            "federation-pair",
            "--service",
            identity["hypernet_id"],
            "--ticket",
            identity["ticket"],
            "--scope",
            "discover",
            "--scope",
            "inference:invoke",
            "--scope",
            "models:read",
            "--scope",
            "models:transfer",
        )
        print(f"offer {offer['id']}: {offer['state']}")

        say("beta approves with an exact, limited grant and signs a receipt")
        grant = {
            "scopes": ["discover", "inference:invoke", "models:read", "models:transfer"],
            "services": [service],
            "models": [model],
            "concurrent": 2,
            "transfer_bytes": 200 * 1024 * 1024,
        }
        approved = ficc(
            beta,
            "federation-approve",
            offer["id"],
            "--input",
            "-",
            stdin=json.dumps({"revision": offer["revision"], "grant": grant}),
        )
        print(f"receipt {approved['receipt']['digest']}")

        say("alpha checks the receipt and finishes the pairing")
        finished = ficc(
            alpha, "federation-finish", offer["id"], "--receipt", approved["receipt"]["digest"]
        )
        peer = finished["peer"]["id"]
        print(f"peer {peer} paired; grant {finished['peer']['selected']} selected")

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

        say("A chat completion on beta's engine through alpha's OpenAI-compatible URL")
        deadline = time.monotonic() + 120
        while beta_api.get(f"/api/v1/inference/services/{service}").json()["state"] != "running":
            if time.monotonic() > deadline:
                sys.exit("the service did not start")
            time.sleep(0.5)
        url = f"{alpha_url}/api/v1/federation/peers/{peer}/v1/chat/completions"
        with httpx.stream(
            "POST",
            url,
            headers={"Authorization": f"Bearer {alpha_token}"},
            timeout=120,
            json={
                "model": service,
                "stream": True,
                "temperature": 0,
                "max_tokens": 48,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            },
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    delta = json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                    print(delta, end="", flush=True)
        print()

        say("alpha acquires beta's model: verified, resumable, within the allowance")
        ficc(alpha, "federation-acquire", peer, model, "--deadline", "600", show=True)
        print(json.dumps(ficc(alpha, "models")["models"][0]["provenance"], indent=2))
        say("Done. Every step is in each cluster's audit log (GET /api/v1/federation/audit).")
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
