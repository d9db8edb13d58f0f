"""log_completions' tables go to logs/completions.log, not the rank log (#58: 11 MB of rich
tables in rank 0's log in 20 steps). TRL's own printer, called as its trainer calls it."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from hpc_grpo.rundir.contract import LOGS
from hpc_grpo.runtime.rank.observe import completions


def _print_as_trl_does(step: int) -> None:
    """As TRL 1.16's trainer calls it: its logs' prompts and completions are deques."""
    import trl.trainer.grpo_trainer as grpo

    grpo.print_prompt_completions_sample(
        deque(["What is 2 + 2?"]), deque([f"four \x00\x1b[2J raw {'x' * 300}"]),
        {"accuracy": [1.0]}, [0.5], step, 1)


def test_the_tables_go_to_their_file_not_the_rank_log(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import trl.trainer.grpo_trainer as grpo

    original = grpo.print_prompt_completions_sample
    path = tmp_path / LOGS / completions.COMPLETIONS_LOG
    with completions.tables_to(path):
        _print_as_trl_does(3)
        _print_as_trl_does(4)
    rank_log = capsys.readouterr()
    assert rank_log.out == "" and rank_log.err == ""
    text = path.read_text()
    assert "Step 3" in text and "Step 4" in text and "What is 2 + 2?" in text
    assert "\x1b" not in text and "\x00" not in text  # no colour codes, no raw control bytes
    assert "four \\x00\\x1b[2J raw" in text  # the completion's own bytes, escaped
    assert grpo.print_prompt_completions_sample is original  # put back


def test_trl_is_put_back_after_an_exception(tmp_path: Path) -> None:
    import trl.trainer.grpo_trainer as grpo

    original = grpo.print_prompt_completions_sample
    with pytest.raises(RuntimeError), completions.tables_to(tmp_path / "c.log"):
        raise RuntimeError("a step failed")
    assert grpo.print_prompt_completions_sample is original
