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


def _plausible(word: str, choice: str) -> bool:
    """False when two names share only their leading words (torch_dtype, torch_compile): what
    follows the shared words must look alike too, or one must be the other plus words."""
    a, b = word.split("_"), choice.split("_")
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    rest_a, rest_b = "_".join(a[shared:]), "_".join(b[shared:])
    if not shared or not rest_a or not rest_b:
        return True
    return difflib.SequenceMatcher(None, rest_a, rest_b).ratio() >= 0.5


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint naming the closest known word, or listing a few when none is close."""
    options = sorted(choices)
    close = [c for c in difflib.get_close_matches(word, options, n=5, cutoff=0.6)
             if _plausible(word, c)]
    if close:
        return f"did you mean '{close[0]}'?"
    shown = ", ".join(options[:8]) + (", ..." if len(options) > 8 else "")
    return f"known: {shown}"
