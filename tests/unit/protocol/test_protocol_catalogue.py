"""docs/protocol.md's operation catalogue is the operation table's: regenerate it with
scripts/make-catalogue when a row changes."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

from ficc.domain.operations import Streaming
from ficc.services.remote.shapes import NAMED
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


def test_every_operation_has_its_body_and_answer_in_the_generated_catalogue() -> None:
    """The meanings are generated too: each operation has a row of the bodies-and-answers
    tables inside the markers, none outside them."""
    script = make_catalogue()
    document = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    inside = script.catalogue()
    after = document.split(script.END, 1)[1]
    for name in OPERATIONS:
        assert inside.count(f"| `{name}` |") == 2, name
        assert f"| `{name}` |" not in after, f"{name} is documented beside the catalogue"


def test_every_body_field_has_its_meaning() -> None:
    """A row's ``about`` is where its body's fields are named (optional ones as optional), so
    each must say what it means."""
    for name, row in OPERATIONS.items():
        assert all(meaning for _, meaning in row.about.body.members), name


def test_a_streamed_answer_says_what_its_chunks_are_and_a_json_answer_names_its_members() -> None:
    for name, row in OPERATIONS.items():
        about = row.about
        if row.streaming is Streaming.ALWAYS:
            assert about.answer is None, name
            assert "CHUNK" in about.answer_note, name
        elif row.streaming is Streaming.WHEN_ASKED:
            assert "CHUNK" in about.answer_note, name
            assert "END" in about.answer_note, name
        else:
            assert about.answer is not None, name


def test_every_named_shape_is_defined_in_the_document() -> None:
    document = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    for shape in NAMED:
        assert f"- **{shape.name}** ({shape.note}), an object of:" in document
