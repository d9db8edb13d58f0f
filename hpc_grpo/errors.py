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
    """Several problems found in one pass, so the user fixes them all in one go (one line each,
    the first LISTED of them: a file of 95,000 unknown keys printed 95,000 lines)."""

    LISTED = 20

    def __init__(self, problems: Sequence[UserError]) -> None:
        shown = [p.one_line().removeprefix("error: ") for p in problems[:self.LISTED]]
        super().__init__("; ".join(shown + [self.more(len(problems))] * (len(problems) > self.LISTED)))
        self.problems = tuple(problems)

    @classmethod
    def more(cls, count: int) -> str:
        return f"... and {count - cls.LISTED} more"

    @classmethod
    def listed(cls, problems: Sequence[UserError]) -> bool:
        """Whether a problem added after ``problems`` would be printed: a costly hint (a
        did-you-mean) is computed for those only."""
        return len(problems) < cls.LISTED

    def lines(self) -> list[str]:
        shown = [line for problem in self.problems[:self.LISTED] for line in problem.lines()]
        return shown + [f"error: {self.more(len(self.problems))}"] * (len(self.problems) > self.LISTED)


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

