"""FICC adapters/runtimes layer."""
