"""FICC web/routers layer."""
