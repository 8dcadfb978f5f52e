"""HTTP routes, one module per concept; each handler calls one use case."""
