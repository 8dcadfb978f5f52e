"""`python -m ficc` is the same program as the `ficc` console script."""

from ficc.cli.main import main

if __name__ == "__main__":
    main()
