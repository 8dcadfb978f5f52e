"""Helpers for the operations tests: the server's JSON log lines and its Prometheus figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from tests.support.cluster import RunningCluster


def json_lines(log_path: Path) -> list[dict[str, Any]]:
    """Every whole JSON object line of a server's log (its plain stdout lines are skipped)."""
    records = []
    # The server may be writing a line right now: only newline-terminated lines are whole.
    for line in log_path.read_text().split("\n")[:-1]:
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def access_lines(log_path: Path, request_id: str) -> list[dict[str, Any]]:
    return [
        record
        for record in json_lines(log_path)
        if record.get("logger") == "ficc.access" and record.get("request_id") == request_id
    ]


def scrape(cluster: RunningCluster) -> str:
    response = cluster.owner().get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` whose labels include ``labels`` (0 when absent)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                total += found.value
    return total


def family_names(text: str) -> set[str]:
    """The metric families of an exposition (counters without their ``_total``)."""
    return {family.name for family in text_string_to_metric_families(text)}


def label_values(text: str, name: str, label: str) -> set[str]:
    return {
        found.labels[label]
        for family in text_string_to_metric_families(text)
        for found in family.samples
        if found.name == name and label in found.labels
    }


def error_request_id(response: httpx.Response) -> str:
    return str(response.json()["error"]["details"]["request_id"])
