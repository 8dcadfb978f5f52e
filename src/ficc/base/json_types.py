"""Names for JSON of open shape, so a loose value says what it is rather than ``Any``.

A JSON object whose members its reader checks before use is a :data:`JSONObject`: its values
are ``object``, so the type checker asks for the check. The views a service answers with are
frozen dataclasses beside the concept they show, rendered to JSON by ``web/presenters``.
"""

from __future__ import annotations

from typing import TypeAlias

JSONObject: TypeAlias = dict[str, object]
"""A JSON object of open shape: decoded from a peer or a request, or about to be encoded."""
