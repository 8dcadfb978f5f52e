"""Alembic migrations of the FICC database."""
