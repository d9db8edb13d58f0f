"""A local dataset file read with the standard library on the login node: its columns, and for
JSON lines every row, so that a broken line is refused before submit with its number.

The probe (runtime/rank/data/inputs_probe.py) loads the file with ``datasets`` as the ranks do,
but only where the site's python has the training stack; this check runs everywhere. A JSONL
line that does not parse made every rank fail with DatasetGenerationError and no line number,
after the queue wait, and ``resume`` submitted it again (issue #58).

What each format gets here: ``.jsonl`` every value (a blank line is skipped, as ``datasets``
skips it; a value spread over several lines is read as one, as it reads it); ``.json`` the whole
document parsed, its first row's columns; ``.csv`` the header only; ``.parquet`` nothing (no
stdlib reader: the probe loads it where it can).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.checkpoints import special_file

SHOWN_CHARS = 40  # of a broken line, in the refusal
# The file formats the ranks load (runtime/rank/data: datasets' json, csv and parquet builders).
FORMATS = (".csv", ".json", ".jsonl", ".parquet")
_PARQUET_MAGIC = b"PAR1"  # a Parquet file's first and last four bytes


def local_columns(path: Path) -> list[str] | None:
    """The file's columns (None: a format not read here); a file that does not parse, or a
    JSONL file with no rows or a row that is not an object, is a UserError naming the line.
    A FIFO or device is refused unopened: reading it waits (a FIFO) or never ends."""
    if kind := special_file(path):
        raise UserError(f"dataset {path} is {kind}, not a file", field="dataset",
                        hint="give a .jsonl/.json/.csv/.parquet file or a save_to_disk folder")
    if path.is_file() and path.suffix not in FORMATS:  # the child said it, after the child's
        # caches were written into the run (eval) (#58)
        raise UserError(f"dataset file {path} is not one of {', '.join(FORMATS)}",
                        field="dataset", hint="name the file by its format, or give a "
                        "save_to_disk folder or a hub id")
    try:
        if path.suffix == ".parquet":
            _parquet_checked(path)
            return None
        if path.suffix == ".jsonl":
            return _jsonl_columns(path)
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data if isinstance(data, list) else data.get("data", [])
            return list(rows[0]) if rows else []
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                return next(csv.reader(handle), [])
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise UserError(f"dataset {path} does not parse: {exc}", field="dataset",
                        hint="a .json dataset is a list of objects: [{\"prompt\": ...}]") from None
    except csv.Error as exc:  # a header over csv's field limit: a binary file named .csv
        raise UserError(f"dataset {path} is not a CSV file: {exc}", field="dataset",
                        hint="the first line of a .csv file names its columns (prompt,...)") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"dataset {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x})",
                        field="dataset", hint="save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"dataset {path} cannot be read: {exc.strerror or exc}",
                        field="dataset", hint="give a .jsonl/.json/.csv/.parquet file you can "
                        "read (a save_to_disk folder by its name, without a file suffix)") from None
    return None


def _parquet_checked(path: Path) -> None:
    """Columns are not read (no stdlib reader; the probe loads the file where it can), but a
    file that is no Parquet at all (empty, another format renamed) is told from its magic bytes:
    it failed in the eval child after the child wrote into the shared datasets cache (#58)."""
    with path.open("rb") as handle:
        head = handle.read(len(_PARQUET_MAGIC))
        size = handle.seek(0, 2)
        tail = b""
        if size >= 2 * len(_PARQUET_MAGIC):
            handle.seek(-len(_PARQUET_MAGIC), 2)
            tail = handle.read()
    if head != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
        why = "empty" if not size else "no PAR1 magic bytes at its start and end"
        raise UserError(f"dataset {path} is not a Parquet file ({why})",
                        field="dataset", hint="write it with pandas' or pyarrow's to_parquet, "
                        "or name it by its format")


def _jsonl_columns(path: Path) -> list[str]:
    """Every row of a JSON-lines file decoded; the first row's keys."""
    first: dict[str, object] | None = None
    for number, value in _jsonl_values(path):
        if not isinstance(value, dict):
            raise UserError(
                f"dataset {path} line {number} is {json.dumps(value)[:SHOWN_CHARS]}, not a JSON "
                "object", field="dataset", hint="each line of a .jsonl file is one row: {\"prompt\": ...}")
        if first is None:
            first = value
    if first is None:
        raise UserError(f"dataset {path} has no rows (the file is empty)", field="dataset",
                        hint="one JSON object per line: {\"prompt\": ...}")
    return list(first)


def _jsonl_values(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) of each JSON value. One value per line is the fast path; a line
    that does not parse alone is read with the lines after it, as ``datasets`` would."""
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8-sig") as handle:
        lines = iter(enumerate(handle, start=1))
        for number, line in lines:
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
                continue
            except json.JSONDecodeError:
                pass
            text = line + "".join(rest for _, rest in lines)  # the slow path reads the rest
            yield from _stream(decoder, text, number, path)
            return


def _stream(decoder: json.JSONDecoder, text: str, start: int, path: Path
            ) -> Iterator[tuple[int, object]]:
    """Values separated by whitespace, from line ``start``; the first that does not decode is
    refused by the line it begins on."""
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return
        number = start + text.count("\n", 0, at)
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            shown = text[at:].split("\n", 1)[0]
            shown = shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS] + "..."
            raise UserError(f"dataset {path} line {number} is not JSON ({exc.msg}): {shown}",
                            field="dataset",
                            hint="each line of a .jsonl file is one JSON object; fix or drop "
                                 "that line") from None
        yield number, value
