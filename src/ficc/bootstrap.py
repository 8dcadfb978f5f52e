"""The composition root: settings in, wired services out. Only entrypoints import it."""
