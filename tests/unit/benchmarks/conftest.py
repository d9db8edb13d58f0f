"""The shared assertion helpers of these tests live outside test_* files: rewritten here (before
any test module imports them), so that a failure shows its values."""

import pytest

pytest.register_assert_rewrite("tests.unit.benchmarks.lora_results")
