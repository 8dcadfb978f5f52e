"""Shared fixtures of the FICC suite."""
