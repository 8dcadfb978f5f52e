"""The `ficc` command line: thin click commands over the control socket."""
