"""The web console: server-rendered pages and htmx fragments, no JavaScript build.

Every action calls the same service (or the same API handler) as the HTTP API, with the same
checks: the session cookie plus the ``X-CSRF-Token`` header on every unsafe request, the scopes
of the API route, and the project named in the path. An action answers 204 with an
``HX-Trigger`` event; each page's section listens for it and fetches itself again, and pages
with work in progress poll their section instead of reloading.
"""

from __future__ import annotations

from fastapi import APIRouter

from ficc.web.routers.ui import accounts, entry, federation, work

router = APIRouter()
"""Every console route, in the order of its pages (the routes themselves, not nested routers:
the app's middlewares read each route)."""
router.routes.extend(entry.front.routes)
for pages in (entry, federation, work, accounts):
    router.routes.extend(pages.router.routes)
