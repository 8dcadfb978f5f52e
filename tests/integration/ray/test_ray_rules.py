"""The rules of FICC's Ray mode that need no Ray cluster: lazy import, node IDs, dead nodes."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

from ficc.adapters.ray_nodes import RayNodes, ficc_node_id, namespace_of, parse_ray_node

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RAY_ID = "e00f9e8930e596a2259ff87893ef6805e53b1915587240781921b070"


def test_the_cli_and_the_default_serve_path_do_not_load_ray() -> None:
    probe = (
        "import sys, ficc.cli.main, ficc.cli.serve, ficc.bootstrap;"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
    shown = subprocess.run(
        [sys.executable, "-m", "ficc", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "--ray ADDRESS" in shown.stdout


def test_a_ray_node_keeps_its_ficc_id_and_a_dead_one_is_unavailable() -> None:
    entry = {
        "NodeID": RAY_ID,
        "Alive": False,
        "NodeManagerAddress": "127.0.0.1",
        "NodeManagerHostname": "vm",
        "Resources": {"CPU": 2.0, "memory": 4096.0, "GPU": 1.0},
        "Labels": {"zone": "a"},
    }
    node = parse_ray_node(entry, {"memory": 1024.0})
    (listed,) = RayNodes("127.0.0.1:6379", namespace_of("abc")).as_nodes([node], NOW)
    assert listed.id == ficc_node_id(RAY_ID)
    assert ficc_node_id(RAY_ID) == ficc_node_id(RAY_ID.upper().lower())
    assert listed.ray_node_id == RAY_ID
    assert (listed.cpu_count, listed.memory_bytes, len(listed.gpus)) == (2, 4096, 1)
    assert listed.available is False
    assert listed.memory_available_bytes == 0
    shown = listed.as_json()
    assert shown["labels"] == {"zone": "a"}
    assert shown["availability"]["available"] is False
    assert shown["availability"]["reason"] == "the node left the Ray cluster"


def test_each_ficc_cluster_has_its_own_fixed_namespace() -> None:
    assert namespace_of("KEYONE") == namespace_of("KEYONE")
    assert namespace_of("KEYONE") != namespace_of("KEYTWO")
