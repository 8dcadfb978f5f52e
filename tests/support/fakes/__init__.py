"""In-memory stand-ins for the ports, for service tests that run in milliseconds."""
