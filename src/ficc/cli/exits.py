"""The CLI's exit status, by the error's class: FICC's errors are translated here, once.

0 done, 1 refused by FICC, 2 usage error, 3 no server, 4 deadline reached, 5 outcome unknown
(inspect, or retry with the same ``mutation_id``: never read it as refused), 130 interrupted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, Final, NoReturn, TypeVar

from ficc.base.errors import ErrorShape, FiccError, OutcomeUnknown, render
from ficc.cli.client import NoServer, ServerTimeout
from ficc.cli.output import fail_with, show_error

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NO_SERVER = 3
EXIT_DEADLINE = 4
EXIT_OUTCOME_UNKNOWN = 5
EXIT_INTERRUPTED = 130

EXIT_BY_CLASS: Final[dict[type[FiccError], int]] = {OutcomeUnknown: EXIT_OUTCOME_UNKNOWN}
"""Errors a script must handle otherwise than a refusal; every other FICC error is 1. An
unreachable peer or a failed engine stays 1, as the contract has it: nothing was done."""

F = TypeVar("F", bound=Callable[..., Any])


def exit_status(error: FiccError) -> int:
    """The CLI's exit status for ``error``, by its class (the nearest listed in its MRO)."""
    for cls in type(error).__mro__:
        if cls in EXIT_BY_CLASS:
            return EXIT_BY_CLASS[cls]
    return EXIT_REFUSED


def fail(error: FiccError) -> NoReturn:
    """``error``'s envelope on stderr, then exit with the status of its class."""
    show_error(render(error, ErrorShape.FICC))
    sys.exit(exit_status(error))


def handles_errors(function: F) -> F:
    """Translate FICC errors to the CLI's exit codes, once."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except NoServer as exc:
            fail_with("no_server", str(exc), None, EXIT_NO_SERVER)
        except ServerTimeout as exc:
            fail_with("timeout", str(exc), {"seconds": exc.seconds}, EXIT_DEADLINE)
        except FiccError as exc:
            fail(exc)
        except KeyboardInterrupt:
            fail_with("interrupted", "interrupted", None, EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]
