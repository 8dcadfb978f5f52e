"""OpenAI-compatible engines, reached over HTTP: the client, its stream reader, its errors, the
usage probe for engines that stream none, and the pool of clients the runtimes share."""
