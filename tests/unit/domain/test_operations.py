"""Remote operations: the scope each needs, mutation IDs, invoke paths and bodies.

The names, scopes and mutation flags are the rows of the operation table
(``ficc.services.remote.table.OPERATIONS``); the rules applied to them live in the domain.
"""

from __future__ import annotations

import pytest

from ficc.base.errors import InvalidInput, PermissionDenied
from ficc.domain.operations import (
    check_mutation_id,
    check_scope,
    invoke_path,
    only_fields,
    parse_body,
)
from ficc.domain.scopes import REMOTE_SCOPES
from ficc.services.remote.table import OPERATIONS, grant_operation

UNDER_GRANT = sorted(name for name, row in OPERATIONS.items() if row.scopes is not None)

MUTATION_ID = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("name", UNDER_GRANT)
def test_every_operation_is_allowed_by_its_scopes_and_by_no_other(name: str) -> None:
    needed = OPERATIONS[name].scopes
    assert needed is not None
    for scope in REMOTE_SCOPES:
        if scope in needed:
            check_scope(name, needed, frozenset({scope}))
        else:
            with pytest.raises(PermissionDenied) as refused:
                check_scope(name, needed, frozenset({scope}))
            assert refused.value.details["operation"] == name


@pytest.mark.parametrize("name", ["", "inference", "grant.request", "pairing.offer", 3, None])
def test_an_operation_outside_the_grant_table_is_refused(name: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        grant_operation(name)
    assert refused.value.details["field"] == "operation"


@pytest.mark.parametrize("name", UNDER_GRANT)
def test_mutations_require_a_mutation_id_and_reads_refuse_one(name: str) -> None:
    mutation = OPERATIONS[name].mutation
    if mutation:
        assert check_mutation_id(name, mutation, MUTATION_ID) == MUTATION_ID
        with pytest.raises(InvalidInput):
            check_mutation_id(name, mutation, None)
        with pytest.raises(InvalidInput):
            check_mutation_id(name, mutation, "XYZ")
    else:
        assert check_mutation_id(name, mutation, None) is None
        with pytest.raises(InvalidInput):
            check_mutation_id(name, mutation, MUTATION_ID)


@pytest.mark.parametrize(
    ("given", "path"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("chat/completions", "/v1/chat/completions"),
        ("/completions", "/v1/completions"),
        ("/v1/responses", "/v1/responses"),
        ("responses", "/v1/responses"),
    ],
)
def test_invoke_paths_are_normalised(given: str, path: str) -> None:
    assert invoke_path(given) == path


@pytest.mark.parametrize("given", ["/v1/models", "/v1/../admin", "", None])
def test_other_invoke_paths_are_refused(given: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        invoke_path(given)
    assert refused.value.details["field"] == "body.path"


def test_bodies_are_objects_with_known_fields_only() -> None:
    with pytest.raises(InvalidInput):
        parse_body([])
    with pytest.raises(InvalidInput) as unknown:
        only_fields({"id": 1, "extra": 2}, {"id"}, set())
    assert unknown.value.details["field"] == "body.extra"
    with pytest.raises(InvalidInput) as missing:
        only_fields({}, {"id"}, {"id"})
    assert missing.value.details["field"] == "body.id"
