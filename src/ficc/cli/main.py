"""Entry point of the `ficc` console script."""

import click


@click.group()
def cli() -> None:
    """FICC: a control plane for inference clusters."""


def main() -> None:
    cli()
