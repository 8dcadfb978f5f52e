"""Shared vocabulary of FICC: errors, IDs and units. Imports nothing else of ficc."""
