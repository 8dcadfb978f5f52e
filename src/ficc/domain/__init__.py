"""FICC domain layer."""
