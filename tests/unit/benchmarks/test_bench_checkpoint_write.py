"""benchmarks/bench_checkpoint_write.py on a small file: every variant written, read back equal
and timed in rotating order; the JSON the session tests read; bad variants refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import bench_checkpoint_write as bench


def test_every_variant_is_written_read_back_and_timed(tmp_path: Path) -> None:
    out = tmp_path / "write.json"
    code = bench.main(["--gib", "0.003", "--rounds", "3", "--dir", str(tmp_path),
                       "--variants", ",".join(bench.VARIANTS), "--out", str(out)])
    assert code == 0
    saved = json.loads(out.read_text())
    assert set(saved["seconds"]) == set(bench.VARIANTS)
    assert all(len(times) == 3 and min(times) > 0 for times in saved["seconds"].values())
    assert saved["over_with_crc32"]["with_crc32"] == 1.0
    assert saved["ratio_without_over_with"] == saved["over_with_crc32"]["without_crc32"]
    assert list(tmp_path.iterdir()) == [out]  # its scratch folder removed
    probe = tmp_path / "probe.pt"  # the process is left with torch's default: CRC-32s written
    torch.save({"x": torch.ones(4)}, probe)
    import zipfile
    with zipfile.ZipFile(probe) as archive:
        assert archive.testzip() is None


def test_variants_without_the_baseline_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--gib", "0.001", "--dir", str(tmp_path), "--variants", "without_crc32"])
    assert exc.value.code == 2
