"""Version numbers and PEP 440-style specifiers, as doctor compares the nodes' packages with the
supported matrix (no packaging dependency on the login node)."""

from __future__ import annotations

import re

_SPEC = re.compile(r"^\s*(~=|==|!=|>=|<=|>|<)\s*([0-9][0-9a-zA-Z.*+!-]*)\s*$")


def parse_version(text: str) -> tuple[int, ...]:
    """Leading release numbers: ``2.6.0+cu124`` -> (2, 6, 0). Pre-releases count as the release."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not match:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def satisfies(version: str, spec: str) -> bool:
    """Whether ``version`` meets a PEP 440-style specifier list such as ``>=0.22.0,<=0.31.0``."""
    have = parse_version(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = _SPEC.match(clause)
        if not match:
            raise ValueError(f"not a version specifier: {clause!r}")
        op, text = match.groups()
        if op in ("==", "!=") and text.endswith(".*"):
            prefix = parse_version(text[:-2])
            ok = have[: len(prefix)] == prefix
            ok = ok if op == "==" else not ok
        elif op == "~=":
            want = parse_version(text)
            ok = _compare(have, want) >= 0 and have[: len(want) - 1] == want[:-1]
        else:
            cmp = _compare(have, parse_version(text))
            ok = {"==": cmp == 0, "!=": cmp != 0, ">=": cmp >= 0, "<=": cmp <= 0,
                  ">": cmp > 0, "<": cmp < 0}[op]
        if not ok:
            return False
    return True
