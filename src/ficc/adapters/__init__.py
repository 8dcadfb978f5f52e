"""FICC adapters layer."""
