"""Build frozen dataclasses from YAML mappings, refusing unknown keys and wrong types.

A typo in a cluster profile should fail on the login node with a suggestion, not silently fall
back to a default and surface as a hung job two hours later.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hpc_grpo.errors import UserError, did_you_mean
from hpc_grpo.rundir.checkpoints import special_file

T = TypeVar("T")


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-5`` as a float: YAML 1.1 wants ``1.0e-5``, users write ``1e-5``."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


# YAML 1.1's base-60 numbers: an unquoted ``max_time: 1:30:00`` would be the int 5400, read as
# 5400 minutes (Slurm's "minutes" form), not 90. YAML 1.2 has none: they stay strings here.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, re.compile("^(?!.*:)" + regexp.pattern.removeprefix("^"), regexp.flags)
             if tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float") else regexp)
            for tag, regexp in resolvers]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()}


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


# A recipe or profile is a screenful of keys. A larger file is a wrong path (a dataset, a log):
# 10 MB of keys took minutes to parse and check before printing anything (#58).
MAX_YAML_BYTES = 1 << 20


def _read_text(path: Path, what: str) -> str:
    """The file's text, or one line saying why it cannot be had: ``--site`` and ``--recipe``
    name any path, so a folder, a file the user may not read, one saved in another encoding
    (Latin-1 from an old editor) or one over MAX_YAML_BYTES is bad input, not a reason for a
    traceback or a wait. Read up to the limit only (/dev/zero never ends); a FIFO is refused
    before it is opened (the open waits for a writer)."""
    if kind := special_file(path):
        raise UserError(f"{what} {path} is {kind}, not a YAML file", field=what,
                        hint=f"give the path of the {what}'s .yaml file")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            raise UserError(f"{what} {path} is over {MAX_YAML_BYTES >> 20} MiB, the most a "
                            f"{what} may be", field=what,
                            hint=f"is it the {what}? a {what} is a page of keys") from None
        return data.decode("utf-8")  # YAML is UTF-8, whatever the login's locale
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist", field=what) from None
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a directory, not a YAML file", field=what,
                        hint="give the path of the .yaml file in it") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise UserError(f"{what} {path} is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} "
                        f"on line {line}", field=what, hint="save it as UTF-8") from None
    except OSError as exc:  # permission denied, an I/O error of the file system
        raise UserError(f"{what} {path} cannot be read: {exc.strerror or exc}", field=what,
                        hint="check that the file is yours to read") from None


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """Parse a YAML mapping, turning every parser complaint into one user-facing line."""
    text = _read_text(path, what)
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(
            f"{what} {path} does not parse{where}: {problem}",
            field=what,
            hint="check indentation and quoting",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} must be a mapping of keys to values", field=what)
    return data


def _scalar_text(value: Any, where: str) -> str:
    """A string-valued mapping's value (a profile's env): text, an integer or a boolean.
    Anything else has no one text form: ``KEY:`` left empty is null and was exported as
    ``KEY=None``, a list or mapping as its Python repr, and an unquoted ``3.10`` is the float
    3.1. A YAML boolean (``true``, ``yes``, ``on``) is exported as ``true``/``false``, not
    Python's ``True``, which programs reading the variable do not all take."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    hint = ("an empty value is YAML's null: write '' for an empty string, or leave the key out"
            if value is None else f"quote it: YAML read it as {type(value).__name__} {value!s}")
    raise UserError(f"expected text, an integer or true/false, got {value!r}", field=where,
                    hint=hint)


def _check_type(value: Any, annotation: Any, where: str) -> Any:
    """Return ``value`` converted to ``annotation`` where lossless, else raise UserError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(value, arg, where)
            except UserError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is typing.Literal:
        if value not in args:
            raise UserError(
                f"{value!r} is not one of {', '.join(map(str, args))}",
                field=where,
                hint=did_you_mean(str(value), map(str, args)),
            )
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise UserError(f"expected a list, got {value!r}", field=where)
        return tuple(_check_type(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise UserError(f"expected a mapping, got {value!r}", field=where)
        if args and args[1] is str:
            return {str(k): _scalar_text(v, f"{where}.{k}") for k, v in value.items()}
        return dict(value)
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        if not isinstance(value, dict):
            raise UserError(f"expected a mapping, got {value!r}", field=where)
        return from_mapping(annotation, value, where)
    if annotation is Any:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if annotation is int and isinstance(value, bool):
        raise UserError(f"expected a whole number, got {value!r}", field=where)
    if isinstance(annotation, type) and not isinstance(value, annotation):
        raise UserError(
            f"expected {annotation.__name__}, got {type(value).__name__} {value!r}", field=where
        )
    return value


def from_mapping(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    """Instantiate dataclass ``cls`` from ``data``; unknown keys get a did-you-mean hint."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        raise UserError(
            f"unknown key '{key}'",
            field=f"{where}.{key}" if where else key,
            hint=did_you_mean(str(key), fields),
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _check_type(value, hints[name], f"{where}.{name}" if where else name)
    missing = [
        f.name
        for f in fields.values()
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise UserError(
            f"missing required key '{missing[0]}'",
            field=f"{where}.{missing[0]}" if where else missing[0],
        )
    return cls(**kwargs)
