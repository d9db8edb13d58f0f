"""runtime/posttrain/check.py: the export's check tells a faithful export from a broken one.

Two tiny Qwen2 models built from a config (no tokenizer training, a character tokenizer
stand-in): the same weights pass with zero difference; bf16-rounded weights pass bf16's
tolerance but not fp32's; a model with other weights (what a lost tied lm_head or a wrong
merge gives) fails both.
"""

from __future__ import annotations

from typing import Any

import pytest

from hpc_grpo.runtime.posttrain import check  # noqa: E402
from tests.unit.runtime.posttrain.check_helpers import CharTokenizer, tiny, torch, transformers


def written(model: Any, dtype: Any, folder: Any) -> Any:
    """What an export in ``dtype`` loads as: saved, then read back in fp32 (non-persistent
    buffers such as the rotary inv_freq recomputed, not rounded)."""
    model.to(dtype).save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def test_same_weights_pass_rounded_ones_pass_as_bf16_only_other_ones_fail(tmp_path: Any) -> None:
    reference, tokenizer = tiny(0), CharTokenizer()
    same = check.compare(reference, tiny(0), tokenizer, "float32")
    assert same.passed and same.max_abs_diff == 0.0 and same.greedy_equal == same.texts == 3
    assert same.tokens == sum(len(t) - 1 for t in check.TEXTS)
    as_bf16 = check.compare(tiny(0), written(tiny(0), torch.bfloat16, tmp_path / "b"), tokenizer,
                            "bfloat16")
    assert as_bf16.passed and as_bf16.max_abs_diff <= check.TOLERANCE
    # rounding every floating tensor, the rotary inv_freq too, is not what a folder holds
    assert not check.compare(tiny(0), tiny(0).to(torch.bfloat16).float(), tokenizer, "bfloat16").passed
    exact = check.reference(tiny(0), tokenizer)
    moved = check.rounding(exact, check.reference(check.rounded(tiny(0), "bfloat16"), tokenizer),
                           "bfloat16")
    assert moved["max_abs_diff"] > 10 * check.TOLERANCE and "passed" not in moved  # reported only
    assert not check.compare(tiny(0), written(tiny(0), torch.bfloat16, tmp_path / "c"), tokenizer,
                             "float32").passed
    other = check.compare(tiny(0), tiny(1), tokenizer, "bfloat16")
    assert not other.passed and other.max_abs_diff > 100 * check.TOLERANCE
    assert other.to_dict()["passed"] is False and other.to_dict()["engine"] == "transformers (CPU)"


def test_the_mean_can_be_the_statistic_judged() -> None:
    ref = check.Reference(ids=((1, 2, 3),), logprobs=((-1.0, -2.0),), greedy=((4,),))
    spiky = check.judge(ref, [[-1.0, -2.6]], [[4]], 0.5, "x", judged_on="mean")
    assert spiky.passed and spiky.max_abs_diff == pytest.approx(0.6)
    assert spiky.mean_abs_diff == pytest.approx(0.3)
    assert not check.judge(ref, [[-1.0, -2.6]], [[4]], 0.5, "x").passed  # on the max
    assert not check.judge(ref, [[-1.7, -2.6]], [[5]], 0.5, "x", judged_on="mean").passed


def test_a_merge_is_judged_in_fp32_against_the_unmerged_model() -> None:
    peft = pytest.importorskip("peft")
    tokenizer = CharTokenizer()
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    adapted = peft.get_peft_model(tiny(0), config).eval()
    with torch.no_grad():  # lora_B starts at zero: give the adapter something to say
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    unmerged = check.reference(adapted, tokenizer)
    import copy

    good = check.merge(unmerged, check.reference(copy.deepcopy(adapted).merge_and_unload(), tokenizer))
    assert good.passed and good.max_abs_diff < check.MERGE_TOLERANCE / 10
    with adapted.disable_adapter():
        lost = check.merge(unmerged, check.reference(adapted, tokenizer))
    assert not lost.passed  # the base without its adapter: what a merge that did nothing writes
