"""
The miscompilation bisector: given a program that xfuse gets wrong, find the single pass that
breaks it, within a fusion pass the single fusion decision, shrink the program, and print the
minimal IR as a lit test.

    report = bisect_reproducer(Path("fail_1_17.py"))   # an `xfuse-fuzz` reproducer
    print(report)                                      # culprit, decision, lit test

1. Pass: the program is imported and the pipeline `xfuse.compile` runs (`compile_pipeline`: the
   fusion pipeline with the device's own passes) applied one pass at a time; after each, the
   interpreter must still agree with eager. The first pass after which it does not (or that
   crashes) is the culprit. When every pass is fine, the culprit is the backend (the lowered
   loops are checked with the loop interpreter to tell lower-to-loops from code generation).
2. Decision: a culprit with a `max_fusions` option (`fuse-greedy`, `fuse-scored`) is re-run
   with `max-fusions=N`; the smallest failing N names the fusion that breaks the program.
3. Shrink: on the IR that enters the culprit, ops are deleted (their results become new
   function arguments carrying the values they had) or bypassed (replaced by an operand of the
   same type), and outputs dropped, as long as the culprit still changes the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FunctionType, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xfuse.errors import BisectError
from xfuse.pipeline import (
    DEFAULT_PIPELINE,
    PassFactories,
    Pipeline,
    PipelineOptions,
    compile_pipeline,
)
from xfuse.testing.fuzz.compare import compare_outputs, flat_tensors
from xfuse.testing.fuzz.program import RMSE_TOLERANCE, load_source
from xfuse.testing.fuzz.reproducer import program_part

Tensor = torch.Tensor
Problem = str | None
"""What is wrong (one line), or None when the two runs agree."""
Oracle = Callable[[ModuleOp, Sequence[Tensor]], Problem]


# ---------------------------------------------------------------------------------------------
# Running IR
# ---------------------------------------------------------------------------------------------


def forward_of(module: ModuleOp) -> func.FuncOp:
    from xfuse.interpreters.graph import find_function

    return find_function(module, "forward")


def run_ir(module: ModuleOp, inputs: Sequence[Tensor]) -> list[Tensor]:
    from xfuse.interpreters.graph import interpret

    return interpret(module, [t.clone() for t in inputs])


def run_backend(module: ModuleOp, inputs: Sequence[Tensor], device: str = "cpu") -> list[Tensor]:
    """The module (after fusion) through the runtime's compiler and executor, as
    `xfuse.compile` runs it."""
    from xfuse.backends import get_backend
    from xfuse.runtime.cache import default_cache
    from xfuse.runtime.compiler import ProgramCompiler
    from xfuse.runtime.executor import run_program
    from xfuse.runtime.steps import BufferPool

    backend, cache = get_backend(device), default_cache()
    program = ProgramCompiler(lambda m, name: cache.kernel(backend, m, name)).compile(
        module.clone()
    )
    return [t.cpu() for t in run_program(program, [t.to(device) for t in inputs], BufferPool())]


def run_loops(module: ModuleOp, inputs: Sequence[Tensor]) -> list[Tensor]:
    from xfuse.interpreters.loops import run_lowered
    from xfuse.runtime.compiler import lower_to_loops

    lowered = module.clone()
    lower_to_loops(lowered)
    return run_lowered(lowered, [t.clone() for t in inputs])


def apply_pass(module_pass: ModulePass, module: ModuleOp) -> ModuleOp:
    """A transformed copy (verified); the original is left alone."""
    out = module.clone()
    Pipeline((module_pass,)).apply(out)
    return out


def crash_line(e: BaseException) -> str:
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
    return f"crash: {type(e).__name__}: {first}"[:300]


def pass_oracle(module_pass: ModulePass, crashes: bool) -> Oracle:
    """A problem when `module_pass` changes what the interpreter computes (or, for a crashing
    culprit, when the pass still crashes)."""

    def oracle(module: ModuleOp, inputs: Sequence[Tensor]) -> Problem:
        try:
            before = run_ir(module, inputs)
        except Exception:
            return None  # not a valid program: not a reduction of the bug
        try:
            after = run_ir(apply_pass(module_pass, module), inputs)
        except Exception as e:
            return crash_line(e) if crashes else None
        return None if crashes else compare_outputs(after, before)

    return oracle


def backend_oracle(
    runner: Callable[[ModuleOp, Sequence[Tensor]], list[Tensor]], crashes: bool
) -> Oracle:
    """A problem when `runner` (the backend, or lowering + loop interpreter) disagrees with the
    interpreter on the same module."""

    def oracle(module: ModuleOp, inputs: Sequence[Tensor]) -> Problem:
        try:
            expected = run_ir(module, inputs)
        except Exception:
            return None
        try:
            got = runner(module, inputs)
        except Exception as e:
            return crash_line(e) if crashes else None
        return None if crashes else compare_outputs(got, expected)

    return oracle


# ---------------------------------------------------------------------------------------------
# Shrinking
# ---------------------------------------------------------------------------------------------


def values_of(module: ModuleOp, inputs: Sequence[Tensor]) -> dict[SSAValue, Tensor]:
    """Every top-level value of @forward, computed by the interpreter."""
    from xfuse.interpreters.graph import run_op

    block = forward_of(module).body.block
    env: dict[SSAValue, Tensor] = dict(zip(block.args, [t.clone() for t in inputs], strict=True))
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            break
        outs = run_op(op, [env[v] for v in op.operands])
        env.update(zip(op.results, [t.clone() for t in outs], strict=True))
    return env


def body_ops(module: ModuleOp) -> list[Operation]:
    return [op for op in forward_of(module).body.block.ops if not isinstance(op, func.ReturnOp)]


def refresh_signature(f: func.FuncOp) -> None:
    """Make the function type and argument attributes match the block after an edit."""
    block = f.body.block
    ret = block.last_op
    results = [v.type for v in ret.operands] if isinstance(ret, func.ReturnOp) else []
    f.function_type = FunctionType.from_lists([a.type for a in block.args], results)
    f.arg_attrs = ArrayAttr(
        [DictionaryAttr({"graph.input": StringAttr(f"a{i}")}) for i in range(len(block.args))]
    )
    f.res_attrs = None


def erase_dead(block: Block) -> None:
    changed = True
    while changed:
        changed = False
        for op in reversed(list(block.ops)):
            if not isinstance(op, func.ReturnOp) and all(not r.uses for r in op.results):
                op.detach()
                op.erase()
                changed = True


def drop_unused_args(module: ModuleOp, inputs: list[Tensor]) -> list[Tensor]:
    block = forward_of(module).body.block
    kept: list[Tensor] = []
    for arg, t in reversed(list(zip(block.args, inputs, strict=True))):
        if arg.uses:
            kept.append(t)
        else:
            block.erase_arg(arg)
    return list(reversed(kept))


def tidy(module: ModuleOp, inputs: list[Tensor]) -> list[Tensor]:
    f = forward_of(module)
    erase_dead(f.body.block)
    inputs = drop_unused_args(module, inputs)
    refresh_signature(f)
    return inputs


@dataclass
class Case:
    """A module and the arguments of its @forward."""

    module: ModuleOp
    inputs: list[Tensor]

    def copy(self) -> Case:
        return Case(self.module.clone(), list(self.inputs))

    @property
    def size(self) -> int:
        return len(body_ops(self.module))


def cut_op(case: Case, index: int) -> Case | None:
    """Op `index` deleted: its used results become new arguments with the values they had."""
    values = values_of(case.module, case.inputs)
    new = case.copy()
    old_op, op = body_ops(case.module)[index], body_ops(new.module)[index]
    block = forward_of(new.module).body.block
    inputs = list(new.inputs)
    for old_result, result in zip(old_op.results, op.results, strict=True):
        if result.uses:
            arg = block.insert_arg(result.type, len(block.args))
            result.replace_all_uses_with(arg)
            inputs.append(values[old_result])
    op.detach()
    op.erase()
    return Case(new.module, tidy(new.module, inputs))


def bypass_op(case: Case, index: int) -> Case | None:
    """Op `index` replaced by its first operand of the same type as its (only) result."""
    op = body_ops(case.module)[index]
    if len(op.results) != 1:
        return None
    same = [i for i, v in enumerate(op.operands) if v.type == op.results[0].type]
    if not same:
        return None
    new = case.copy()
    twin = body_ops(new.module)[index]
    twin.results[0].replace_all_uses_with(twin.operands[same[0]])
    return Case(new.module, tidy(new.module, list(new.inputs)))


def keep_output(case: Case, index: int) -> Case | None:
    """Only output `index` returned."""
    ret = forward_of(case.module).body.block.last_op
    if not isinstance(ret, func.ReturnOp) or len(ret.operands) <= 1:
        return None
    new = case.copy()
    new_ret = forward_of(new.module).body.block.last_op
    assert isinstance(new_ret, func.ReturnOp)
    return _return_only(new, new_ret.operands[index])


def return_result(case: Case, index: int) -> Case | None:
    """The first result of op `index` returned instead of the outputs (drops what follows)."""
    op = body_ops(case.module)[index]
    if not op.results:
        return None
    new = case.copy()
    return _return_only(new, body_ops(new.module)[index].results[0])


def _return_only(case: Case, value: SSAValue) -> Case:
    block = forward_of(case.module).body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    ret.detach()
    ret.erase()
    block.add_op(func.ReturnOp(value))
    return Case(case.module, tidy(case.module, list(case.inputs)))


def shrink(case: Case, oracle: Oracle, max_steps: int = 400) -> Case:
    """The smallest case the edits reach that still fails (greedy, to a fixed point)."""
    steps = 0
    changed = True
    while changed and steps < max_steps:
        changed = False
        ret = forward_of(case.module).body.block.last_op
        n_outputs = len(ret.operands) if ret is not None else 0
        edits: list[Callable[[], Case | None]] = [
            *(lambda c=case, k=k: keep_output(c, k) for k in range(n_outputs)),
            *(lambda c=case, i=i: return_result(c, i) for i in range(case.size)),
            *(lambda c=case, i=i: cut_op(c, i) for i in range(case.size)),
            *(lambda c=case, i=i: bypass_op(c, i) for i in range(case.size)),
        ]
        for edit in edits:
            steps += 1
            try:
                smaller = edit()
            except Exception:
                continue
            if smaller is not None and smaller.size <= case.size and _still_fails(smaller, oracle):
                if (
                    smaller.size < case.size
                    or len(smaller.inputs) < len(case.inputs)
                    or (_n_outputs(smaller) < _n_outputs(case))
                ):
                    case, changed = smaller, True
                    break
    return case


def _still_fails(case: Case, oracle: Oracle) -> bool:
    try:
        forward_of(case.module).verify()
    except Exception:
        return False
    return oracle(case.module, case.inputs) is not None


def _n_outputs(case: Case) -> int:
    ret = forward_of(case.module).body.block.last_op
    return len(ret.operands) if ret is not None else 0


# ---------------------------------------------------------------------------------------------
# Bisection
# ---------------------------------------------------------------------------------------------


@dataclass
class BisectReport:
    """What the bisector found."""

    culprit: str
    """The pass name, "import", "lower-to-loops" or "codegen"."""
    problem: str
    culprit_spec: str = ""
    """The pipeline text that reproduces it on `case` (e.g. `fuse-scored{max-fusions=3}`)."""
    decision: int | None = None
    """1-based index of the fusion that breaks the program, for a fusion pass."""
    decision_detail: str = ""
    original_size: int = 0
    case: Case | None = None
    notes: list[str] = field(default_factory=list[str])

    def lit_test(self) -> str:
        if self.case is None:
            return ""
        run = self.culprit_spec or self.culprit
        lines = [
            f"// RUN: xfuse-opt %s -p '{run}' | filecheck %s",
            f"// xfuse-fuzz --bisect: {self.summary_line()}",
            f"// {self.problem[:300]}",
            f"// (the arguments that show it: {len(self.case.inputs)} tensors of the shapes below)",
            "",
            str(self.case.module),
            "",
            "// CHECK-LABEL: func.func @forward",
        ]
        return "\n".join(lines)

    def summary_line(self) -> str:
        where = f"pass '{self.culprit}'"
        if self.decision is not None:
            where += f", fusion decision {self.decision}"
            if self.decision_detail:
                where += f" ({self.decision_detail})"
        return f"{where} breaks the program"

    def __str__(self) -> str:
        out = [f"culprit: {self.summary_line()}", f"problem: {self.problem}"]
        if self.case is not None:
            out.append(f"shrunk: {self.original_size} ops -> {self.case.size} ops")
        out += [f"note: {n}" for n in self.notes]
        if self.case is not None:
            out += ["", self.lit_test()]
        return "\n".join(out)


def spec_text(module_pass: ModulePass) -> str:
    """The pass as `xfuse-opt -p` text, option names spelled with dashes."""
    import re

    text = str(module_pass.pipeline_pass_spec())
    return re.sub(r"(\w+)=", lambda m: m.group(1).replace("_", "-") + "=", text)


def _with_max_fusions(module_pass: ModulePass, n: int) -> ModulePass:
    # Only for passes with a max_fusions field (has_decisions), which ModulePass lacks.
    return dataclasses.replace(module_pass, max_fusions=n)  # type: ignore[call-arg]  # pyright: ignore[reportArgumentType]


def has_decisions(module_pass: ModulePass) -> bool:
    return dataclasses.is_dataclass(module_pass) and any(
        f.name == "max_fusions" for f in dataclasses.fields(module_pass)
    )


def first_bad_decision(module_pass: ModulePass, case: Case, crashes: bool) -> int | None:
    """The smallest N such that the pass limited to its first N fusions already fails."""

    def fails(n: int) -> bool:
        oracle = pass_oracle(_with_max_fusions(module_pass, n), crashes)
        return oracle(case.module, case.inputs) is not None

    if fails(0):
        return None  # not a fusion: the pass fails without fusing anything
    hi = 1
    while not fails(hi):
        if hi > 1 << 16:
            return None
        hi *= 2
    lo = hi // 2  # fails(lo) is false (lo == 0 was checked)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid
    return hi


def describe_decision(module_pass: ModulePass, case: Case, n: int) -> str:
    """The group that fusion `n` makes: its rule and ops."""
    from xfuse.dialects.fusion import GroupOp

    def groups(limit: int) -> dict[str, GroupOp]:
        module = apply_pass(_with_max_fusions(module_pass, limit), case.module)
        return {str(g): g for g in module.walk() if isinstance(g, GroupOp)}

    before = groups(n - 1)
    try:
        after = groups(n)
    except Exception as e:
        return f"the pass crashes making it: {crash_line(e)}"
    new = [g for text, g in after.items() if text not in before]
    if not new:
        return ""
    g = new[0]
    ops = " ".join(op.name for op in g.block.ops if op.name != "fusion.yield")
    return f"{g.rule.data}: {ops}"


@dataclass
class Bisector:
    """Bisects one program: eager `expected` outputs, the imported program and its inputs.

    The passes are those `xfuse.compile` runs on `device` (`compile_pipeline`): `pipeline`,
    the device's passes after `decompose`, with `channels_last` and the convolutions kept as
    library calls (`library`) as compile's options had them (`FusionReport.options`).
    `passes` replaces the passes `pipeline` may name."""

    pipeline: str = DEFAULT_PIPELINE
    passes: PassFactories | None = None
    device: str = "cpu"
    channels_last: bool | None = None
    library: tuple[str, ...] = ()

    @classmethod
    def replaying(cls, options: PipelineOptions, device: str = "cpu") -> Bisector:
        """A bisector of the passes a compile with `options` ran on `device`."""
        return cls(options.spec, None, device, options.channels_last, options.library)

    def compile_passes(self) -> tuple[ModulePass, ...]:
        """The passes bisected, in order: new instances each call."""
        options = PipelineOptions(self.pipeline, self.channels_last, self.library)
        return compile_pipeline(self.device, options, passes=self.passes).passes

    def pipeline_text(self) -> str:
        """`compile_passes` as `xfuse-opt -p` text."""
        return ",".join(spec_text(p) for p in self.compile_passes())

    def bisect_source(self, source: str) -> BisectReport:
        from xfuse.frontend import import_module

        namespace = load_source(source)
        program, make_inputs = namespace["program"], namespace["make_inputs"]
        expected = flat_tensors(program(*make_inputs()))
        reference = None
        if namespace.get("TOLERANCE") == RMSE_TOLERANCE:
            f64 = [t.double() if t.dtype == torch.float32 else t for t in make_inputs()]
            reference = flat_tensors(program(*f64))
        try:
            imported = import_module(program, make_inputs())
        except Exception as e:
            return BisectReport("import", crash_line(e))
        inputs = imported.arguments(*make_inputs())
        return self.bisect_module(imported.module, inputs, expected, reference)

    def bisect_module(
        self,
        module: ModuleOp,
        inputs: Sequence[Tensor],
        expected: Sequence[Tensor],
        reference: Sequence[Tensor] | None = None,
    ) -> BisectReport:
        """Find the culprit for a module (graph IR, as imported) whose results should be
        `expected`, then the decision, then shrink."""
        case = Case(module.clone(), list(inputs))
        problem = self._problem(lambda: run_ir(case.module, case.inputs), expected, reference)
        if problem is not None:
            return BisectReport("import", problem)
        for module_pass in self.compile_passes():
            try:
                after = apply_pass(module_pass, case.module)
            except Exception as e:
                return self._finish(module_pass, case, crash_line(e), crashes=True)
            problem = self._problem(partial(run_ir, after, case.inputs), expected, reference)
            if problem is not None:
                return self._finish(module_pass, case, problem, crashes=False)
            case = Case(after, case.inputs)
        return self._backend(Case(module.clone(), list(inputs)), case, expected, reference)

    @staticmethod
    def _problem(
        run: Callable[[], list[Tensor]],
        expected: Sequence[Tensor],
        reference: Sequence[Tensor] | None,
    ) -> Problem:
        try:
            got = run()
        except Exception as e:
            return crash_line(e)
        # `@forward`'s results after eager's outputs are hidden ones (views share them).
        return compare_outputs(got[: len(expected)], expected, reference)

    def _finish(
        self, module_pass: ModulePass, case: Case, problem: str, crashes: bool
    ) -> BisectReport:
        spec = spec_text(module_pass)
        report = BisectReport(module_pass.name, problem, spec, original_size=case.size)
        oracle = pass_oracle(module_pass, crashes)
        if oracle(case.module, case.inputs) is None:
            report.notes.append("the pass alone does not change the interpreter's result")
            report.case = case
            return report
        small = shrink(case, oracle)
        report.case = small
        report.problem = oracle(small.module, small.inputs) or problem
        if has_decisions(module_pass):
            n = first_bad_decision(module_pass, small, crashes)
            if n is not None:
                report.decision = n
                report.decision_detail = describe_decision(module_pass, small, n)
                report.culprit_spec = spec_text(_with_max_fusions(module_pass, n))
        return report

    def _backend(
        self,
        start: Case,
        case: Case,
        expected: Sequence[Tensor],
        reference: Sequence[Tensor] | None,
    ) -> BisectReport:
        """Every pass keeps the interpreter's result, the backend does not: shrink the
        imported program (ops, not whole groups) with the pipeline + backend as the oracle."""
        problem = self._problem(
            lambda: run_backend(case.module, case.inputs, self.device), expected, reference
        )
        if problem is None:
            raise BisectError("the program does not fail: nothing to bisect")
        crashes = problem.startswith("crash:")
        passes = self.compile_passes()
        text = self.pipeline_text()

        def fused(runner: Callable[[ModuleOp, Sequence[Tensor]], list[Tensor]]) -> Oracle:
            def through_pipeline(m: ModuleOp, xs: Sequence[Tensor]) -> list[Tensor]:
                out = m.clone()
                Pipeline(passes).apply(out)
                return runner(out, xs)

            return backend_oracle(through_pipeline, crashes)

        loops = fused(run_loops)
        if loops(start.module, start.inputs) is not None:
            culprit, oracle = "lower-to-loops", loops
        else:
            culprit = f"codegen ({self.device})"
            oracle = fused(lambda m, xs: run_backend(m, xs, self.device))
        report = BisectReport(culprit, problem, text, original_size=start.size)
        if oracle(start.module, start.inputs) is None:
            report.notes.append("the backend agrees with the interpreter on the fused IR")
            return report
        report.case = shrink(start, oracle)
        report.problem = oracle(report.case.module, report.case.inputs) or problem
        report.notes.append(
            f"the IR below is the imported program; `-p '{text}'` fuses it, and the "
            f"{self.device} backend then computes something else than the interpreter"
        )
        return report


def bisect_reproducer(
    path: Path,
    pipeline: str = DEFAULT_PIPELINE,
    passes: PassFactories | None = None,
    device: str = "cpu",
) -> BisectReport:
    """Bisect an `xfuse-fuzz` reproducer (or any file defining `program` and `make_inputs`)
    through the passes `xfuse.compile` runs on `device` with `pipeline`."""
    text = path.read_text()
    source = program_part(text)
    try:
        namespace: dict[str, Any] = load_source(source, str(path))
    except Exception as e:
        raise BisectError(f"cannot load {path}: {crash_line(e)}") from None
    if "program" not in namespace or "make_inputs" not in namespace:
        raise BisectError(f"{path} defines no `program` and `make_inputs`")
    return Bisector(pipeline, passes, device).bisect_source(source)
