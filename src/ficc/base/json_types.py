"""Names for JSON of open shape, so a loose value says what it is rather than ``Any``.

A JSON object whose members its reader checks before use is a :data:`JSONObject`: its values
are ``object``, so the type checker asks for the check. Shapes that are fixed (the views a
service answers with) are ``TypedDict``s beside the concept they show.
"""

from __future__ import annotations

from typing import TypeAlias

JSONObject: TypeAlias = dict[str, object]
"""A JSON object of open shape: decoded from a peer or a request, or about to be encoded."""
