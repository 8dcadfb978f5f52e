"""What the engines' clients and streams share: ``async with`` closes them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class ClosedOnExit(ABC):
    """A resource that ``async with`` hands back as itself and closes with :meth:`aclose`,
    however the block ends."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the resource holds."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close, whatever ended the block (the exception, if any, goes on)."""
        await self.aclose()
