"""
PyTorch's OpInfo database through `xfuse.compile`: what xfuse makes of each op's sample inputs,
compared with eager (as Inductor's `test/inductor/test_torchinductor_opinfo.py` does).

Each sample has one outcome:

- `fused`: it runs with no eager part (kernels, views, and by-design externs such as matmul);
- `eager`: some op runs eagerly (`graph.torch_call`) or a group fell back; `detail` names them;
- `refused`: xfuse.compile refused it with an `XfuseError` (one line, in `detail`);
- `mismatch`: the values differ from eager's (torch's tolerances; reductions may instead meet
  the f64-reference RMSE criterion);
- `crash`: anything else (an exception that is not an `XfuseError`, a time-out).

`mismatch` and `crash` are bugs. The others are coverage, recorded per sample in the checked-in
expectations table (`tests/testing/opinfo_expected.tsv`) so that a change shows in review.

    python -m xfuse.testing.opinfo                       # the coverage table (CI's subset)
    python -m xfuse.testing.opinfo --full --write PATH   # every sample and dtype, to a table
    python -m xfuse.testing.opinfo --inductor            # the share of what Inductor lowers

Against Inductor (`--inductor`: how much of what Inductor lowers xfuse lowers too): a sample is
*Inductor-lowered* when every aten (and prims) op of its function, traced by `make_fx` on the
real sample after functionalisation (as AOTAutograd hands Inductor its graph) with Inductor's
decomposition table (`torch._inductor.decomposition.select_decomp_table()`), has a lowering in
`torch._inductor.lowering.lowerings` and is not one of `torch._inductor.lowering.fallbacks`
(the ops Inductor registers as running eagerly, such as `_linalg_svd`, `nonzero`, `cumsum` on
some paths, `rand`). Ops Inductor runs as extern kernels by design count as lowered, as xfuse
counts its own by-design externs (matmul) as `fused`: mm/bmm/addmm/baddbmm/convolution have
lowerings that call the extern kernel and are not in `fallbacks` anyway, and the CPU and CUDA
attention kernels (`INDUCTOR_EXTERNS`) are counted as lowered although Inductor lists them as
fallbacks. A sample eager refuses, or that `make_fx` cannot trace, is not Inductor-lowered. The
report gives, per dtype, the Inductor-lowered samples, how many of them xfuse fuses (no eager
part), the share, and the rest with xfuse's outcome and its detail; `--table PATH` takes
xfuse's outcomes from a table written by `--write` instead of compiling again (given twice, the
second table's rows replace the first's: a rerun of some ops over a whole sweep).
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from xfuse.dialects import graph
from xfuse.errors import XfuseError
from xfuse.testing.fuzz.compare import compare_outputs
from xfuse.testing.limits import ProgramTimeout, time_limit

OUTCOMES = ("fused", "eager", "refused", "mismatch", "crash")
BUGS = ("mismatch", "crash")

DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "bool": torch.bool,
}

SAMPLE_SECONDS = 60
"""A sample that takes longer (export, fusion, kernel compilation and the run) is a crash."""

EXPECTED = Path(__file__).resolve().parents[2] / "tests" / "testing" / "opinfo_expected.tsv"


@dataclass(frozen=True)
class Result:
    """The outcome of one sample: `key` names it (op, variant, dtype, sample index)."""

    op: str
    variant: str
    dtype: str
    index: int
    outcome: str
    detail: str = ""

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.op, self.variant, self.dtype, self.index)

    @property
    def brief(self) -> str:
        """`detail` as the table holds it: white space folded, 200 characters at most."""
        return " ".join(self.detail.split())[:200]

    def row(self) -> str:
        return "\t".join(
            [self.op, self.variant or "-", self.dtype, str(self.index), self.outcome, self.brief]
        )

    @staticmethod
    def from_row(line: str) -> Result:
        op, variant, dtype, index, outcome, *detail = line.rstrip("\n").split("\t")
        return Result(
            op, "" if variant == "-" else variant, dtype, int(index), outcome, "".join(detail)
        )


def op_db() -> list[Any]:
    """torch's OpInfo list (it needs the `expecttest` package)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    return list(db)


def op_name(info: Any) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


# ---------------------------------------------------------------------------------------------
# One sample
# ---------------------------------------------------------------------------------------------


def _as_function(info: Any, sample: Any) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    """The sample as a function of its tensors (every other argument is a constant of it)."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = tuple(leaves[i] for i in where)

    def fn(*xs: torch.Tensor) -> Any:
        filled = list(leaves)
        for i, x in zip(where, xs, strict=True):
            filled[i] = x
        input_, args, kwargs = pytree.tree_unflatten(filled, spec)
        return info.op(input_, *args, **kwargs)

    return fn, tensors


def _flat_tensors(value: Any) -> list[torch.Tensor] | None:
    """The tensors of an op's result, or None when it holds something else."""
    leaves = pytree.tree_leaves(value)
    if not all(isinstance(x, torch.Tensor) for x in leaves):
        return None
    return list(leaves)


def _wide(x: Any) -> Any:
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _seeded(fn: Callable[..., Any], tensors: Sequence[torch.Tensor], seed: int = 0) -> Any:
    """`fn(*tensors)` from a fixed RNG state."""
    torch.manual_seed(seed)
    return fn(*tensors)


def _deterministic(fn: Callable[..., Any], tensors: Sequence[torch.Tensor], first: Any) -> bool:
    """Whether eager gives the same values from another RNG state (random ops do not, nor does
    torch.empty and its kin, whose values are undefined): only then are values compared."""
    again = _flat_tensors(_seeded(fn, tensors, seed=1))
    return again is not None and compare_outputs(again, first) is None


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros(t.shape, dtype=t.dtype)


UNDEFINED_VALUES = ("aten.empty", "aten.new_empty", "aten.empty_like")
"""torch ops whose results hold whatever the memory held (only their sizes and dtypes count)."""


UNDEFINED_OPINFOS = frozenset(
    {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}
)
"""OpInfos whose results' values are undefined (eager may happen to repeat its garbage, so
`_deterministic` cannot tell): only sizes and dtypes compare, whether xfuse runs torch's op or
its own fresh tensor."""


def _draws_random(compiled: Any) -> bool:
    """Whether the program calls a torch op that draws from the RNG or leaves values undefined."""
    from xfuse.dialects.torch_args import resolve_torch_op

    for op in compiled.default.program.module.walk():
        if not isinstance(op, graph.TorchCallOp):
            continue
        target = op.target.data
        tags = getattr(resolve_torch_op(target), "tags", ())
        if torch.Tag.nondeterministic_seeded in tags or target.startswith(UNDEFINED_VALUES):
            return True
    return False


def _eager_parts(compiled: Any) -> list[str]:
    """What runs eagerly in a compiled program: torch_call targets, and groups that fell back."""
    module = compiled.default.program.module
    calls = sorted({op.target.data for op in module.walk() if isinstance(op, graph.TorchCallOp)})
    return calls + [f"fallback: {f.split(':', 1)[0]}" for f in compiled.fallbacks]


def run_sample(info: Any, sample: Any, dtype: str, index: int, device: str = "cpu") -> Result:
    """Compile one sample with xfuse, run it, and compare with eager."""
    import xfuse

    def result(outcome: str, detail: str = "") -> Result:
        return Result(info.name, info.variant_test_name, dtype, index, outcome, detail)

    fn, tensors = _as_function(info, sample)
    try:
        expected = _seeded(fn, tensors)
    except Exception as e:  # eager itself refuses (an error sample): not xfuse's to compare
        return result("refused", f"eager raises {type(e).__name__}")
    flat_expected = _flat_tensors(expected)
    try:
        with time_limit(SAMPLE_SECONDS), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = xfuse.compile(fn, tensors, device=device, quiet=True)
            with torch.no_grad():
                got = _seeded(compiled, tensors)
    except ProgramTimeout as e:
        return result("crash", str(e))
    except XfuseError as e:
        return result("refused", str(e).splitlines()[0] if str(e) else type(e).__name__)
    except Exception as e:
        return result("crash", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    flat_got = _flat_tensors(got)
    if flat_expected is None or flat_got is None:
        same = flat_expected is None and flat_got is None and got == expected
        return result("fused" if same else "mismatch", "" if same else "non-tensor result differs")
    try:
        reference = _flat_tensors(fn(*(_wide(t) for t in tensors)))
    except Exception:  # the op has no f64 kernel: torch's tolerance alone
        reference = None
    if (
        info.name in UNDEFINED_OPINFOS
        or _draws_random(compiled)
        or not _deterministic(fn, tensors, flat_expected)
    ):
        # Random values (OpInfo seeds inside the op, which torch.export does not trace), or
        # values eager itself does not repeat (torch.empty's): only sizes and dtypes compare.
        problem = compare_outputs([_meta(t) for t in flat_got], [_meta(t) for t in flat_expected])
    else:
        problem = compare_outputs(flat_got, flat_expected, reference)
    if problem is not None:
        return result("mismatch", problem)
    eager = _eager_parts(compiled)
    return result("eager", ", ".join(eager)) if eager else result("fused")


# ---------------------------------------------------------------------------------------------
# A sweep
# ---------------------------------------------------------------------------------------------


def supported(info: Any, dtype: torch.dtype, device: str) -> bool:
    return dtype in info.supported_dtypes(device)


def sweep(
    infos: Iterable[Any],
    dtypes: Sequence[str],
    *,
    device: str = "cpu",
    samples: int | None = 1,
) -> Iterator[Result]:
    """Every OpInfo's first `samples` sample inputs (all: None) for each dtype it supports."""
    for info in infos:
        for name in dtypes:
            dtype = DTYPES[name]
            if not supported(info, dtype, device):
                continue
            try:
                inputs = list(info.sample_inputs(device, dtype, requires_grad=False))
            except Exception as e:  # torch's own sample generator failed
                yield Result(
                    info.name, info.variant_test_name, name, 0, "refused", f"no samples: {e}"
                )
                continue
            for index, sample in enumerate(inputs[:samples] if samples else inputs):
                yield run_sample(info, sample, name, index, device)


def read_expected(path: Path = EXPECTED) -> dict[tuple[str, str, str, int], Result]:
    if not path.exists():
        return {}
    rows = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {r.key: r for r in map(Result.from_row, rows)}


def write_expected(results: Iterable[Result], path: Path = EXPECTED) -> None:
    """Write the table (bugs are never expectations: they fail whatever the table says)."""
    header = (
        "# op\tvariant\tdtype\tsample\toutcome\tdetail (python -m xfuse.testing.opinfo --write)"
    )
    rows = sorted((r for r in results if r.outcome not in BUGS), key=lambda r: r.key)
    path.write_text("\n".join([header, *(r.row() for r in rows)]) + "\n")


def coverage_table(results: Sequence[Result]) -> str:
    """Counts by dtype and outcome, and the ops that run eagerly most often."""
    lines = ["dtype  " + "  ".join(f"{o:>8}" for o in OUTCOMES) + "     all"]
    for dtype in sorted({r.dtype for r in results}):
        counts = Counter(r.outcome for r in results if r.dtype == dtype)
        total = sum(counts.values())
        lines.append(
            f"{dtype:<6} " + "  ".join(f"{counts[o]:>8}" for o in OUTCOMES) + f"  {total:>6}"
        )
    eager = Counter(
        part for r in results if r.outcome == "eager" for part in r.detail.split(", ") if part
    )
    if eager:
        lines.append(
            "ops run eagerly (samples): " + ", ".join(f"{k} {v}" for k, v in eager.most_common(30))
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Against Inductor: which samples Inductor lowers with no eager fallback
# ---------------------------------------------------------------------------------------------

INDUCTOR_EXTERNS = frozenset(
    {
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention.default",
        "aten._scaled_dot_product_efficient_attention.default",
        "aten._scaled_dot_product_cudnn_attention.default",
        "aten._flash_attention_forward.default",
        "aten._efficient_attention_forward.default",
    }
)
"""Attention kernels Inductor calls as externs by design (it lists them among its fallbacks):
counted as lowered, as the matmul and convolution externs are."""


@functools.cache
def _inductor_lowers(target: Any) -> bool:
    """Whether Inductor lowers one traced op (an OpOverload) with no eager fallback."""
    from torch._inductor.lowering import fallbacks, lowerings

    if not isinstance(target, torch._ops.OpOverload):
        return True  # operator.getitem and other Python glue of the traced graph
    if str(target) in INDUCTOR_EXTERNS:
        return True
    return target in lowerings and target not in fallbacks


@functools.cache
def _inductor_decompositions() -> dict[Any, Any]:
    from torch._inductor.decomposition import select_decomp_table

    return dict(select_decomp_table())


def inductor_unlowered(fn: Callable[..., Any], tensors: Sequence[torch.Tensor]) -> list[str]:
    """The ops of `fn(*tensors)` Inductor does not lower (empty: the sample is Inductor-lowered).

    `fn` is traced on the real tensors (data-dependent ops need their values) after
    functionalisation, with Inductor's decompositions (composite ops included, under the Python
    dispatcher as AOTAutograd traces); a function eager or the tracer refuses
    gives one entry naming the error."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch.fx.experimental.proxy_tensor import make_fx

    try:  # the Python dispatcher applies the table's decompositions of composite ops too
        with warnings.catch_warnings(), enable_python_dispatcher():
            warnings.simplefilter("ignore")
            traced = make_fx(
                torch.func.functionalize(fn, remove="mutations"),
                decomposition_table=_inductor_decompositions(),
                tracing_mode="real",
            )(*tensors)
    except Exception as e:
        return [f"untraceable: {type(e).__name__}"]
    targets = {n.target for n in traced.graph.nodes if n.op == "call_function"}
    return sorted(str(t) for t in targets if not _inductor_lowers(t))


_UNLOWERED: dict[tuple[str, str, int, str], list[str]] = {}


def inductor_lowered(info: Any, dtype: str, index: int, device: str = "cpu") -> list[str]:
    """`inductor_unlowered` of one OpInfo sample, cached (one tracing per sample; the per-op
    verdicts are cached too)."""
    key = (op_name(info), dtype, index, device)
    if key not in _UNLOWERED:
        _UNLOWERED[key] = _classify(info, dtype, index, device)
    return _UNLOWERED[key]


def _classify(info: Any, dtype: str, index: int, device: str) -> list[str]:
    if info.name.startswith("jiterator_"):
        # torch's runtime-compiled CUDA test ops: make_fx of one faults the CUDA context (an
        # illegal memory access on the H100 machine's torch 2.11), spoiling every later sample
        return ["untraceable: jiterator"]
    try:
        sample = list(info.sample_inputs(device, DTYPES[dtype], requires_grad=False))[index]
    except Exception as e:
        return [f"no sample: {type(e).__name__}"]
    fn, tensors = _as_function(info, sample)
    try:
        _seeded(fn, tensors)
    except Exception as e:
        return [f"eager raises {type(e).__name__}"]
    return inductor_unlowered(fn, tensors)


EXTERN_CALLS = frozenset({"aten.convolution.default", "aten.scaled_dot_product_attention.default"})
"""torch_calls xfuse makes on purpose (torch picks the device's kernel), where Inductor calls
an extern kernel too: the report counts the samples they alone keep from `fused` apart."""


def inductor_report(results: Sequence[Result], infos: Iterable[Any], device: str = "cpu") -> str:
    """Per dtype: the Inductor-lowered samples, how many xfuse fuses, and the rest (sorted by
    what runs eagerly)."""
    by_name = {(i.name, i.variant_test_name): i for i in infos}
    lines = []
    for dtype in sorted({r.dtype for r in results}):
        lowered, unlowered = [], Counter[str]()
        for r in (r for r in results if r.dtype == dtype):
            info = by_name.get((r.op, r.variant))
            missing = (
                ["unknown op"] if info is None else inductor_lowered(info, dtype, r.index, device)
            )
            if missing:
                unlowered.update(missing)
            else:
                lowered.append(r)
        fused = [r for r in lowered if r.outcome == "fused"]
        rest = sorted((r for r in lowered if r.outcome != "fused"), key=lambda r: (r.detail, r.key))
        externs = [
            r for r in rest if r.outcome == "eager" and set(r.detail.split(", ")) <= EXTERN_CALLS
        ]
        lines.append(
            f"{dtype}: {len(lowered)} Inductor-lowered samples of {len(results_of(results, dtype))}, "
            f"xfuse fuses {len(fused)} ({_share(fused, lowered)}); with the {len(externs)} "
            f"convolution/attention extern calls: {_share(fused + externs, lowered)}"
        )
        lines.extend(
            f"  {r.op}{'.' + r.variant if r.variant else ''}\t{r.outcome}\t{r.brief}" for r in rest
        )
        lines.append(
            "  not Inductor-lowered (samples by op): "
            + ", ".join(f"{k} {v}" for k, v in unlowered.most_common())
        )
    return "\n".join(lines)


def _share(part: Sequence[Any], whole: Sequence[Any]) -> str:
    return f"{100.0 * len(part) / len(whole):.1f}%" if whole else "-"


def results_of(results: Sequence[Result], dtype: str) -> list[Result]:
    return [r for r in results if r.dtype == dtype]


def _recorded(
    infos: Iterable[Any],
    dtypes: Sequence[str],
    device: str,
    samples: int | None,
    recorded: dict[tuple[str, str, str, int], Result],
) -> Iterator[Result]:
    """The results a table records for these ops and dtypes (the first `samples` of each)."""
    names = {(i.name, i.variant_test_name) for i in infos}
    for r in sorted(recorded.values(), key=lambda r: r.key):
        if (
            (r.op, r.variant) in names
            and r.dtype in dtypes
            and (samples is None or r.index < samples)
        ):
            yield r


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xfuse.testing.opinfo", description=__doc__)
    parser.add_argument("--full", action="store_true", help="every sample of every dtype")
    parser.add_argument("--dtypes", default=None, help="comma-separated: f32,f16,bf16,i64,bool")
    parser.add_argument("--ops", default=None, help="comma-separated op names (default: all)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--write", type=Path, default=None, help="write the expectations table")
    parser.add_argument(
        "--inductor", action="store_true", help="the share of Inductor-lowered samples fused"
    )
    parser.add_argument(
        "--table",
        type=Path,
        action="append",
        default=None,
        help="xfuse's outcomes from this table (no compile); a later --table overrides",
    )
    args = parser.parse_args(argv)
    dtypes = args.dtypes.split(",") if args.dtypes else (list(DTYPES) if args.full else ["f32"])
    infos = op_db()
    if args.ops:
        wanted = set(args.ops.split(","))
        infos = [i for i in infos if i.name in wanted or op_name(i) in wanted]
    results = []
    samples = None if args.full else 1
    if args.table is not None:
        recorded = {k: r for path in args.table for k, r in read_expected(path).items()}
        sweep_ = _recorded(infos, dtypes, args.device, samples, recorded)
    else:
        sweep_ = sweep(infos, dtypes, device=args.device, samples=samples)
    for r in sweep_:
        results.append(r)
        if r.outcome in BUGS:
            print(r.row(), file=sys.stderr)
    print(coverage_table(results))
    if args.inductor:
        print(inductor_report(results, infos, device=args.device))
    if args.write is not None:
        write_expected(results, args.write)
    return 1 if any(r.outcome in BUGS for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
