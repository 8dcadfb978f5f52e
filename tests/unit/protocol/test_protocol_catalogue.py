"""docs/protocol.md's operation catalogue is the operation table's: regenerate it with
scripts/make-catalogue when a row changes."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

from ficc.services.remote.table import OPERATIONS

ROOT = Path(__file__).resolve().parents[3]


def make_catalogue() -> ModuleType:
    loader = SourceFileLoader("make_catalogue", str(ROOT / "scripts" / "make-catalogue"))
    module = ModuleType(loader.name)
    loader.exec_module(module)
    return module


def test_the_document_lists_exactly_the_operation_table() -> None:
    script = make_catalogue()
    document = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert script.catalogue() in document, "run scripts/make-catalogue"
    for name in OPERATIONS:
        assert f"| `{name}` |" in document


def test_every_operation_outside_a_grant_names_its_sender() -> None:
    outside = {name for name, row in OPERATIONS.items() if not row.under_grant}
    assert set(make_catalogue().SENDERS) == outside


def test_every_operation_has_its_body_and_answer_documented() -> None:
    """Beside the generated catalogue, each operation has a row of the hand-written tables of
    bodies and answers: the catalogue names the fields, those rows say what they mean."""
    document = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    _, after = document.split(make_catalogue().END, 1)
    missing = [name for name in OPERATIONS if f"| `{name}` |" not in after]
    assert not missing, f"document the body and answer of {missing}"
