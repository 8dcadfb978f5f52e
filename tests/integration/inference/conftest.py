"""Fixtures of the managed-inference tests: model files on disk, written or found once."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.adapters.example_model import example_model_path


@pytest.fixture(scope="session")
def tiny_model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight GGUF that loads in well under a second (nonsense answers)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="session")
def example_model_file() -> Path:
    """SmolLM2-135M-Instruct, the example model the install brings (sensible answers)."""
    return example_model_path()
