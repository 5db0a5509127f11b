"""The OpInfo sweep: PyTorch's op database through `xfuse.compile` (`xfuse.testing.opinfo`).

A mismatch or a crash fails whatever the table says. Every other outcome must be the one the
checked-in table (`tests/testing/opinfo_expected.tsv`) records, so that a change of coverage
shows in review: after lowering an op, regenerate it with
`python -m xfuse.testing.opinfo --write tests/testing/opinfo_expected.tsv`.

CI runs a subset (the first f32 sample of every `CI_STRIDE`-th op, and of `CI_OPS`); set
`XFUSE_OPINFO=all` for every op's first f32 sample, and run the module with `--full` for every
sample and dtype. The CUDA sweep runs under the `gpu` marker.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")

from xfuse.testing.opinfo import BUGS, op_db, op_name, read_expected, run_sample  # noqa: E402

CI_STRIDE = 6
"""CI sweeps every sixth op of the database (about a sixth of the full sweep's time)."""

CI_OPS = {
    "abs", "add", "mul", "div", "sub", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
    "where", "clamp", "sum", "mean", "amax", "softmax", "log_softmax", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm", "cat", "clone",
    "contiguous", "permute", "reshape", "transpose", "matmul", "var", "pow", "maximum",
}  # fmt: skip
"""Ops every CI run covers: the ones real models use most."""


def _selected() -> list[Any]:
    infos = op_db()
    if os.environ.get("XFUSE_OPINFO") == "all":
        return infos
    return [i for n, i in enumerate(infos) if n % CI_STRIDE == 0 or i.name in CI_OPS]


INFOS = _selected()
EXPECTED = read_expected()


def _check(info: Any, device: str) -> None:
    if torch.float32 not in info.supported_dtypes(device):
        pytest.skip("no f32 support")
    samples = list(info.sample_inputs(device, torch.float32, requires_grad=False))
    if not samples:
        pytest.skip("no samples")
    result = run_sample(info, samples[0], "f32", 0, device)
    assert result.outcome not in BUGS, result.row()
    if device != "cpu":
        return  # the table records the CPU's coverage
    expected = EXPECTED.get(result.key)
    assert expected is not None, f"not in the table, regenerate it: {result.row()}"
    assert (result.outcome, result.brief) == (expected.outcome, expected.brief), (
        f"coverage changed (regenerate the table if intended): was {expected.row()!r}, "
        f"now {result.row()!r}"
    )


@pytest.mark.parametrize("info", INFOS, ids=op_name)
def test_opinfo_first_sample_on_cpu(info: Any) -> None:
    _check(info, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("info", INFOS, ids=op_name)
def test_opinfo_first_sample_on_cuda(info: Any) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check(info, "cuda")
