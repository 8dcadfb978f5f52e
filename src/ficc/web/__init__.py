"""FICC web layer."""
