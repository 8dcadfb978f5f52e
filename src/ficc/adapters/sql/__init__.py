"""FICC adapters/sql layer."""
