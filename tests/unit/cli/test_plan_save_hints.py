"""#59, through the CLI with the shipped 72B recipe (Qwen2.5-Math-72B, 4 x 8 H100) on the
shipped h100-pyxis profile, its output file system declared at 1 GB/s a node: plan warns that
a stop's save does not fit the 300 s signal lead and names the lead that fits, and that the
periodic saves hold training over 5% of the time and names async_save; the same plan with the
lead the hint names and async_save is accepted without either warning, and says the periodic
writes go on beside the steps."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from hpc_grpo.cli import main
from tests.paths import RECIPES, SITE_CONFIGS

RECIPE = str(RECIPES / "qwen2.5-math-72b-4x8-h100.yaml")


def _profile(tmp_path: Path, lead: int | None = None) -> str:
    shipped = (SITE_CONFIGS / "h100-pyxis.yaml").read_text()
    if lead is not None:
        shipped = re.sub(r"(?m)^signal_lead_s: \d+$", f"signal_lead_s: {lead}", shipped)
    path = tmp_path / f"slow-fs-{lead}.yaml"
    path.write_text("output_write_gbs: 1\n" + shipped)
    return str(path)


def _plan(site: str, *extra: str) -> str:
    result = CliRunner().invoke(main, ["plan", "--site", site, "--recipe", RECIPE, *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_save_past_the_lead_and_slow_periodic_saves_are_fixed_by_what_the_hints_name(
        tmp_path: Path) -> None:
    first = _plan(_profile(tmp_path))
    lead = re.search(r"a stop's save needs (\d+) s of warning but the signal lead is 300 s", first)
    assert lead, first
    needed = int(lead[1])
    assert f"set signal_lead_s: {needed} in the site profile" in first
    assert "--set async_save=true writes them in the background" in first
    assert "% of training time spent saving" in first

    second = _plan(_profile(tmp_path, needed), "--set", "async_save=true")
    assert f"signal lead {needed} s: fits" in second, second
    assert "set signal_lead_s" not in second and "--set async_save=true" not in second, second
    assert "written in the background (async_save): training holds only the copy" in second
    assert "async_save holds a node's" not in second  # 203 GiB a node within half of 1800 GiB
