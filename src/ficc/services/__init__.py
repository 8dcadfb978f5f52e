"""FICC services layer."""
