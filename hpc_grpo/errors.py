"""One error type for everything the user can fix: a message, the field it concerns, and a hint.

The CLI turns it into one line on stderr (one per problem of a UserErrors) and exit code 2,
never a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class UserError(Exception):
    """Bad input or an impossible request, reported before anything is submitted."""

    def __init__(self, message: str, *, hint: str = "", field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.field = field

    def one_line(self) -> str:
        where = f"{self.field}: " if self.field else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"error: {where}{self.message}{hint}"

    def lines(self) -> list[str]:
        """What the CLI prints: one line per problem."""
        return [self.one_line()]


class UserErrors(UserError):
    """Several problems found in one pass, so the user fixes them all in one go (one line each)."""

    def __init__(self, problems: Sequence[UserError]) -> None:
        super().__init__("; ".join(p.one_line().removeprefix("error: ") for p in problems))
        self.problems = tuple(problems)

    def lines(self) -> list[str]:
        return [line for problem in self.problems for line in problem.lines()]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint naming the closest known word, or listing a few when none is close."""
    options = sorted(choices)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    shown = ", ".join(options[:8]) + (", ..." if len(options) > 8 else "")
    return f"known: {shown}"
