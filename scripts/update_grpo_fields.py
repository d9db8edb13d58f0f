"""Regenerate hpc_grpo/grpo_fields.txt from the installed TRL.

The launcher checks recipe and ``--set`` keys, value types and allowed values against this list,
so a login node needs no trl and a typo fails before the queue wait; tests/unit/config/test_config.py
compares it with the installed GRPOConfig and fails when they drift apart.

One line per field: ``name kinds [choices]``. ``kinds`` is ``|``-joined from int, float, bool,
str, list, list[str], list[float], list[int], dict, any (not checked), none (null allowed);
``choices`` (comma-separated) are the string values TRL accepts, where it fixes them.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from pathlib import Path
from typing import Any

TARGET = Path(__file__).resolve().parent.parent / "hpc_grpo" / "grpo_fields.txt"
ORDER = ("int", "float", "bool", "str", "list", "list[str]", "list[float]", "list[int]", "dict",
         "any", "none")
# Allowed values TRL states only in a field's help text (no enum, no metadata choices);
# test_config.py checks that each still appears in that help text.
HELP_CHOICES: dict[str, tuple[str, ...]] = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "importance_sampling_level": ("token", "sequence"),
    "scale_rewards": ("group", "batch", "none"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm_importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate",
                                      "sequence_mask"),
    "vllm_model_impl": ("vllm", "transformers"),
    "include_num_input_tokens_seen": ("all", "non_padding", "no"),
}
# Annotations narrower than what GRPOConfig.__post_init__ accepts.
EXTRA_KINDS = {"scale_rewards": ("bool",)}  # True/False map to "group"/"none"


def kinds(annotation: Any) -> list[str]:
    """The launcher's kinds for one annotation; an Enum is its string values."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return [k for a in args for k in kinds(a)]
    if annotation is type(None):
        return ["none"]
    if origin is typing.Literal:
        return [type(a).__name__ if a is not None else "none" for a in args]
    if annotation in (int, float, bool, str):
        return [annotation.__name__]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ["str"]
    if annotation is list or origin is list:
        element = args[0] if args else None
        return [f"list[{element.__name__}]" if element in (str, float, int) else "list"]
    if annotation is dict or origin is dict:
        return ["dict"]
    return ["any"]


def choices(field: dataclasses.Field[Any], annotation: Any) -> list[str]:
    if field.name in HELP_CHOICES:
        return list(HELP_CHOICES[field.name])
    listed = field.metadata.get("choices")
    if listed:
        return [str(c) for c in listed]
    members = [a for a in (typing.get_args(annotation) or (annotation,))
               if isinstance(a, type) and issubclass(a, enum.Enum)]
    return [str(m.value) for e in members for m in e]


def field_lines(config: type) -> list[str]:
    hints = typing.get_type_hints(config)
    lines = []
    for field in sorted(dataclasses.fields(config), key=lambda f: f.name):
        found = set(kinds(hints[field.name])) | set(EXTRA_KINDS.get(field.name, ()))
        text = "|".join(k for k in ORDER if k in found)
        allowed = choices(field, hints[field.name])
        lines.append(f"{field.name} {text}" + (f" {','.join(allowed)}" if allowed else ""))
    return lines


def render() -> str:
    import trl
    from trl import GRPOConfig

    return (f"# GRPOConfig fields of trl {trl.__version__}: name, kinds, allowed values; "
            "regenerate: python scripts/update_grpo_fields.py\n"
            + "\n".join(field_lines(GRPOConfig)) + "\n")


def main() -> int:
    text = render()
    TARGET.write_text(text)
    print(f"wrote {text.count(chr(10)) - 1} fields to {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
