"""The differential runner: each program through the interpreter, the pipeline and the compiled kernels, against eager."""

from __future__ import annotations

import traceback
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from xfuse.errors import XfuseError
from xfuse.pipeline import DEFAULT_PIPELINE, Pipeline, PipelineOptions, compile_pipeline
from xfuse.testing.fuzz.compare import compare_outputs, flat_tensors, same_bits
from xfuse.testing.fuzz.program import RMSE_TOLERANCE, Tensor, load_source


@dataclass
class Outcome:
    """The result of one differential run."""

    status: str
    """pass | fail | skip (torch.export rejects the program)"""
    stage: str = ""
    """Where it failed: "eager", "import", "after <pass>", "loops", "cpu", "cuda"."""
    message: str = ""
    stages: list[str] = field(default_factory=list[str])
    """Stages that ran and matched eager."""

    def __str__(self) -> str:
        if self.status == "pass":
            return f"pass ({', '.join(self.stages)})"
        return f"{self.status} at {self.stage}: {self.message}"


class StageFailure(XfuseError):
    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def _one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def _where(e: BaseException) -> str:
    """The innermost xfuse frame of a crash, so that a report says where to look."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/xfuse/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" [{f.filename.rsplit('/xfuse/', 1)[-1]}:{f.lineno}]"


def outcomes_on(devices: Sequence[str], run: Callable[[str], Outcome]) -> list[Outcome] | Outcome:
    """`run`'s outcome on each device, or the first that is no pass; a crash of the harness
    itself is a failure, reported, never raised (the fuzzer goes on)."""
    found: list[Outcome] = []
    for device in devices:
        try:
            outcome = run(device)
        except Exception as e:  # noqa: BLE001 - the harness itself: report it
            return Outcome("fail", "harness", _one_line(e) + _where(e), ["eager"])
        if outcome.status != "pass":
            return outcome
        found.append(outcome)
    return found


@dataclass
class Differential:
    """Runs one program (from source) through eager and every xfuse stage."""

    source: str
    devices: Sequence[str] = ("cpu",)
    pipeline: str = DEFAULT_PIPELINE
    loop_interpreter: bool = True
    semantics: bool = False
    """Also check what the compiled program's outputs alias (`check_aliasing`), with results
    dropped between calls (recycling), each output at a tolerance of its own magnitude."""
    namespace: dict[str, Any] = field(init=False)
    expected: list[Tensor] = field(init=False)
    reference: list[Tensor] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.namespace = load_source(self.source)

    @property
    def program(self) -> Callable[..., Any]:
        return self.namespace["program"]

    def fresh_inputs(self) -> tuple[Tensor, ...]:
        return tuple(self.namespace["make_inputs"]())

    def run(self) -> Outcome:
        passed: list[str] = []
        try:
            refused = self.run_eager()
            if refused is not None:
                return self.run_refused(refused)
            passed.append("eager")
            imported = self.run_import()
            if imported is None:
                return Outcome("skip", "export", "torch.export rejects the program")
            passed.append("import")
            passed += self.run_passes(imported)
            computed = []
            for device in self.devices:
                refused_here = self.eager_error_on(device)
                if refused_here is not None:  # eager's kernels for `device` refuse it
                    self.compile_refused(device, refused_here)
                    passed.append(f"{device} raises")
                else:
                    passed += self.run_compiled(device)
                    computed.append(device)
            for device in computed:
                passed += self.run_mixed_devices(device)
        except StageFailure as failure:
            return Outcome("fail", failure.stage, failure.message, passed)
        return Outcome("pass", stages=passed)

    def eager_error_on(self, device: str) -> Exception | None:
        """What eager raises for the program on `device`'s kernels, which may refuse what the
        CPU's compute (`baddbmm` of int64 on CUDA) or compute what the CPU's refuse (a layer
        norm of mixed dtypes); None where they compute. The CPU's is `run_eager`'s."""
        if device == "cpu":
            return None
        try:
            with full_f32_on(device):
                self.program(*(same_layout_on(t, device) for t in self.fresh_inputs()))
        except Exception as e:  # noqa: BLE001 - xfuse must raise it too
            return e
        return None

    def check(self, stage: str, got: Sequence[Tensor]) -> None:
        scale: float | list[float] = float(self.namespace.get("SCALE", 1.0))
        if self.semantics:
            scale = [magnitude(e) for e in self.expected]
        problem = compare_outputs(got, self.expected, self.reference, scale)
        if problem is not None:
            raise StageFailure(stage, problem)

    def run_eager(self) -> Exception | None:
        """Eager's outputs (`expected`), or the error eager raises."""
        try:
            self.expected = flat_tensors(self.program(*self.fresh_inputs()))
        except Exception as e:  # noqa: BLE001 - xfuse must raise it too (`run_refused`)
            return e
        if self.namespace.get("TOLERANCE") == RMSE_TOLERANCE:
            self.reference = self.run_f64()
        return None

    # --- where eager raises ------------------------------------------------------------------

    def run_refused(self, error: Exception) -> Outcome:
        """A program eager refuses: the import and `xfuse.compile` (and its call) on each
        device must raise eager's error type, and an `EagerArgumentError` eager's first line.
        A program torch.export rejects is skipped, as elsewhere."""
        from xfuse.frontend import UnsupportedProgram, import_module

        passed = ["eager raises"]
        try:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    import_module(self.program, self.fresh_inputs())
            except UnsupportedProgram as e:
                if str(e).startswith("torch.export failed"):
                    return Outcome("skip", "export", "torch.export rejects the program")
                self.same_error("import", e, error)
            except Exception as e:  # noqa: BLE001 - compared with eager's
                self.same_error("import", e, error)
            else:
                raise StageFailure("import", f"imports what eager refuses: {_one_line(error)}")
            passed.append("import raises")
            for device in self.devices:
                here = error if device == "cpu" else self.eager_error_on(device)
                if here is None:  # eager's kernels for `device` compute it: so must xfuse
                    passed += self.run_computed_on(device)
                    continue
                self.compile_refused(device, here)
                passed.append(f"{device} raises")
        except StageFailure as failure:
            return Outcome("fail", failure.stage, failure.message, passed)
        return Outcome("pass", stages=passed)

    def run_computed_on(self, device: str) -> list[str]:
        """`run_compiled` for a device whose eager kernels compute a program the CPU's refuse,
        against eager's values on that device."""
        with full_f32_on(device):
            on_device = (same_layout_on(t, device) for t in self.fresh_inputs())
            self.expected = [t.cpu() for t in flat_tensors(self.program(*on_device))]
        return self.run_compiled(device)

    def compile_refused(self, device: str, error: Exception) -> None:
        import xfuse

        inputs = tuple(same_layout_on(t, device) for t in self.fresh_inputs())
        try:
            with warnings.catch_warnings(), full_f32_on(device):
                warnings.simplefilter("ignore")
                xfuse.compile(self.program, inputs, device=device, pipeline=self.pipeline)(*inputs)
        except Exception as e:  # noqa: BLE001 - compared with eager's
            self.same_error(device, e, error)
            return
        raise StageFailure(device, f"computes what eager refuses: {_one_line(error)}")

    def run_mixed_devices(self, device: str) -> list[str]:
        """On a GPU, one input (drawn from the source's hash) on the CPU and the rest on
        `device`: where eager refuses the call, compiling it and calling a program compiled
        for agreeing inputs must raise eager's error; where eager computes (a CPU scalar it
        moves), both must refuse with an `InputDeviceError` or compute eager's values."""
        import xfuse
        from xfuse.errors import InputDeviceError

        inputs = self.fresh_inputs()
        if device == "cpu" or len(inputs) < 2:
            return []
        moved = zlib.crc32(self.source.encode()) % len(inputs)
        mixed = tuple(t if i == moved else same_layout_on(t, device) for i, t in enumerate(inputs))
        agreeing = tuple(same_layout_on(t, device) for t in inputs)
        stage = f"{device} mixed devices"
        try:
            want: Exception | list[Tensor] = flat_tensors(self.program(*mixed))
        except Exception as e:  # noqa: BLE001 - xfuse must raise it too
            want = e
        with warnings.catch_warnings(), full_f32_on(device):
            warnings.simplefilter("ignore")
            compiled = xfuse.compile(self.program, agreeing, device=device, pipeline=self.pipeline)
            calls = {
                "compile": lambda: xfuse.compile(
                    self.program, mixed, device=device, pipeline=self.pipeline
                )(*mixed),
                "call": lambda: compiled(*mixed),
            }
            for what, call in calls.items():
                try:
                    got = flat_tensors(call())
                except InputDeviceError:
                    if isinstance(want, Exception):
                        raise StageFailure(
                            stage, f"{what}: refuses where eager raises {_one_line(want)}"
                        ) from None
                    continue
                except Exception as e:  # noqa: BLE001 - compared with eager's
                    if not isinstance(want, Exception):
                        raise StageFailure(
                            stage, f"{what}: raises {_one_line(e)}{_where(e)} where eager computes"
                        ) from e
                    self.same_error(f"{stage} ({what})", e, want)
                    continue
                if isinstance(want, Exception):
                    raise StageFailure(
                        stage, f"{what}: computes what eager refuses: {_one_line(want)}"
                    )
                self.check(f"{stage} ({what})", got)
        return [stage]

    @staticmethod
    def same_error(stage: str, got: Exception, want: Exception) -> None:
        """`got` must be of eager's type, and an `EagerArgumentError` say eager's first line."""
        from xfuse.errors import EagerArgumentError

        if not isinstance(got, type(want)):
            raise StageFailure(
                stage, f"raises {_one_line(got)}{_where(got)} where eager raises {_one_line(want)}"
            )
        lines = str(want).strip().splitlines()
        if isinstance(got, EagerArgumentError) and str(got) != (lines[0] if lines else ""):
            raise StageFailure(stage, f"says {_one_line(got)} where eager says {_one_line(want)}")

    # --- where eager computes ----------------------------------------------------------------

    def run_f64(self) -> list[Tensor] | None:
        return f64_outputs(self.program, self.fresh_inputs(), len(self.expected))

    def run_import(self) -> Any:
        from xfuse.frontend import UnsupportedProgram, import_module

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                imported = import_module(self.program, self.fresh_inputs())
        except UnsupportedProgram as e:
            if str(e).startswith("torch.export failed"):
                return None
            raise StageFailure("import", _one_line(e)) from e
        except Exception as e:
            raise StageFailure("import", _one_line(e) + _where(e)) from e
        self.interpret("import", imported.module, imported)
        return imported

    def interpret(self, stage: str, module: Any, imported: Any) -> None:
        from xfuse.interpreters.graph import interpret

        try:
            got = imported.visible(interpret(module, imported.arguments(*self.fresh_inputs())))
        except Exception as e:
            raise StageFailure(stage, _one_line(e) + _where(e)) from e
        self.check(stage, got)

    def run_passes(self, imported: Any) -> list[str]:
        """The passes `xfuse.compile` runs on the first device, one at a time, the interpreter
        checked after each."""
        stages: list[str] = []
        passes = compile_pipeline(self.devices[0], PipelineOptions(self.pipeline)).passes
        for module_pass in passes:
            stage = f"after {module_pass.name}"
            try:
                Pipeline((module_pass,)).apply(imported.module)
            except Exception as e:
                raise StageFailure(stage, _one_line(e) + _where(e)) from e
            self.interpret(stage, imported.module, imported)
            stages.append(module_pass.name)
        if self.loop_interpreter and self.small() and self.run_loops(imported):
            stages.append("loops")
        return stages

    def small(self) -> bool:
        return sum(t.numel() for t in self.expected) <= 512 and all(
            t.numel() <= 512 for t in self.fresh_inputs()
        )

    def run_loops(self, imported: Any) -> bool:
        """Lowered loops through the loop interpreter; False when some group cannot be
        lowered (the runtime then runs it eagerly, which the CPU stage checks)."""
        from xfuse.errors import CodegenError
        from xfuse.interpreters.loops import run_lowered
        from xfuse.runtime.compiler import lower_to_loops

        module = imported.module.clone()
        try:
            lower_to_loops(module)
        except CodegenError:
            return False  # a group one kernel cannot express: the runtime runs it eagerly
        except Exception as e:
            raise StageFailure("loops", _one_line(e) + _where(e)) from e
        try:
            got = imported.visible(run_lowered(module, imported.arguments(*self.fresh_inputs())))
        except Exception as e:
            raise StageFailure("loops", _one_line(e) + _where(e)) from e
        self.check("loops", got)
        return True

    def run_compiled(self, device: str) -> list[str]:
        """The stages passed: `device`, "<device> import cached" where the second compilation
        took the imported program from the cache (its export key found), and "<device>
        bounds" where the first call ran between guard bands (`first_call`)."""
        import xfuse

        def on_device() -> tuple[Tensor, ...]:
            return tuple(same_layout_on(t, device) for t in self.fresh_inputs())

        try:
            with warnings.catch_warnings(), full_f32_on(device):
                warnings.simplefilter("ignore")
                compiled = xfuse.compile(
                    self.program, on_device(), device=device, pipeline=self.pipeline
                )
                first, guarded = self.first_call(device, compiled, on_device)
                self.check(device, first)
                cached_import = self.check_cached(device, compiled, first, on_device)
                second = flat_tensors(compiled(*on_device()))
        except StageFailure:
            raise
        except Exception as e:
            raise StageFailure(device, _one_line(e) + _where(e)) from e
        self.check(f"{device} (second call)", second)
        bounds = [f"{device} bounds"] if guarded else []
        if self.semantics:
            del first, second  # dropped: the next calls recycle their memory
            self.check_aliasing(device, compiled, on_device)
        return [device, *([f"{device} import cached"] if cached_import else []), *bounds]

    def first_call(
        self, device: str, compiled: Any, on_device: Callable[[], tuple[Tensor, ...]]
    ) -> tuple[list[Tensor], bool]:
        """The program's first call: its results, and whether it ran with every buffer between
        guard bands (`xfuse.testing.guarded`: a program of the CPU), a "<device> (bounds)"
        failure where a kernel wrote past one. The first call, so that such a write corrupts no
        memory before it is seen."""
        from xfuse.runtime.executor import CompiledProgram
        from xfuse.testing.guarded import guarded_buffers

        if device != "cpu" or not isinstance(compiled, CompiledProgram):
            return flat_tensors(compiled(*on_device())), False
        with guarded_buffers(compiled.default) as pool:
            got = flat_tensors(compiled(*on_device()))
        overwritten = pool.overwritten()
        if overwritten:
            raise StageFailure(
                f"{device} (bounds)", "a kernel wrote past a buffer: " + "; ".join(overwritten)
            )
        return got, True

    def check_cached(
        self,
        device: str,
        compiled: Any,
        first: Sequence[Tensor],
        on_device: Callable[[], tuple[Tensor, ...]],
    ) -> bool:
        """The program compiled again as a second process would (a cache with nothing in
        memory), its fused program loaded from the disk cache (`xfuse.runtime.driver.fuse_and_lower`):
        the same groups, kernels and steps as `compiled`; on the CPU its results are `first`
        bit for bit, elsewhere they pass the same check (atomics may order sums otherwise).
        Whether its imported program came from the cache too (`import_for_xfuse`: a program
        without an export key is exported again)."""
        import xfuse
        from xfuse.runtime.cache import KernelCache, default_cache

        stage = f"{device} (fused program from the cache)"
        shared = default_cache()
        cache = KernelCache(shared.directory)
        again = xfuse.compile(
            self.program, on_device(), device=device, pipeline=self.pipeline, cache=cache
        )
        if shared.on_disk and cache.stats.program_hits != 1:
            raise StageFailure(stage, "the fused program was not in the disk cache")
        cached_import = cache.stats.import_hits == 1
        if program_structure(again) != program_structure(compiled):
            raise StageFailure(stage, "not the program the first compilation made")
        got = flat_tensors(again(*on_device()))
        if device != "cpu":
            self.check(stage, got)
            return cached_import
        for i, (a, b) in enumerate(zip(got, first, strict=True)):
            if not same_bits(a, b):
                raise StageFailure(stage, f"output {i} differs from the first compilation's")
        return cached_import

    def check_aliasing(
        self, device: str, compiled: Any, on_device: Callable[[], tuple[Tensor, ...]]
    ) -> None:
        """Write into each output in turn (a fresh call each time, results dropped after): the
        inputs and the other outputs must change where eager's do; then a call after all the
        writes still matches eager (no constant or recycled buffer was changed by them)."""
        stage = f"{device} (aliasing)"
        n_inputs = len(self.fresh_inputs())
        for i in range(len(self.expected)):
            want = write_effects(self.program, self.fresh_inputs, i)
            try:
                with full_f32_on(device):
                    got = write_effects(compiled, on_device, i)
            except Exception as e:
                raise StageFailure(stage, _one_line(e) + _where(e)) from e
            problem = compare_effects(i, want, got, n_inputs)
            if problem is not None:
                raise StageFailure(stage, problem)
        with full_f32_on(device):
            after = flat_tensors(compiled(*on_device()))
        self.check(f"{device} (after writes)", after)


def f64_outputs(
    program: Callable[..., Any], inputs: Sequence[Tensor], count: int
) -> list[Tensor] | None:
    """The program's outputs computed in f64 from its f32 `inputs` (`Float64Casts`), f64 the
    default dtype (an integer's true division, eager's f32, is f64 here): the reference of
    the RMSE rule; None where that run raises or returns other than `count` tensors."""
    wide = [t.double() if t.dtype == torch.float32 else t for t in inputs]
    default = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        with warnings.catch_warnings(), Float64Casts():
            warnings.simplefilter("ignore")  # f64 data with f32 weights: said once, here
            out = flat_tensors(program(*wide))
    except Exception:
        return None
    finally:
        torch.set_default_dtype(default)
    return out if len(out) == count else None


def same_layout_on(t: Tensor, device: str, copy: bool = False) -> Tensor:
    """`t` on `device` with its sizes, strides and storage offset: its whole storage moved,
    viewed as `t` views it. (`t.to(device)` makes an expanded or gapped input dense, and eager's
    aliasing and strides on the device would then not be those of the CPU reference.) `t`
    itself where it is on `device`, unless `copy` asks for a copy."""
    if t.device == torch.device(device) and not copy:
        return t
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())
    moved = flat.to(device, copy=copy)
    return moved.as_strided(t.size(), t.stride(), t.storage_offset())


def program_structure(compiled: Any) -> tuple[Any, ...]:
    """A compiled program's groups, kernels (their operand types and loop IR) and steps: what
    two compilations of one program must share (a warm start's and a cold one's)."""
    return (
        [(g.ops, g.status, g.kernels) for g in compiled.groups],
        [(k.source, k.inputs, k.outputs, k.loop_ir) for k in compiled.kernels],
        [s.label for s in compiled.default.program.steps],
    )


@contextmanager
def full_f32_on(device: str) -> Iterator[None]:
    """f32 matmuls and convolutions in full f32 on CUDA (no TF32), as the CPU reference computes
    them: cuDNN's default TF32 convolutions are 1e-3 off it, in eager as in xfuse."""
    if not device.startswith("cuda"):
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def magnitude(t: Tensor) -> float:
    """The largest magnitude of a floating-point output (its own tolerance scale), else 0."""
    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    finite = t.detach().cpu().double()
    finite = finite[finite.isfinite()]
    return float(finite.abs().max()) if finite.numel() else 0.0


Effects = list[Tensor] | str
"""Where writing into an output changed the call's inputs and outputs (a bool mask each), or
the error the write raised (e.g. into an expanded view)."""


def write_effects(run: Callable[..., Any], make_inputs: Callable[[], Any], i: int) -> Effects:
    """Call `run` on fresh inputs, write into output `i` (every element gets a new value), and
    say which elements of the inputs and outputs changed."""
    inputs = tuple(make_inputs())
    outputs = flat_tensors(run(*inputs))
    watched = [*inputs, *outputs]
    before = [t.detach().clone() for t in watched]
    target = outputs[i]
    try:
        target.copy_(_every_element_changed(target))
    except RuntimeError as e:
        return f"the write raises {type(e).__name__}"
    return [_changed(t, b) for t, b in zip(watched, before, strict=True)]


def _every_element_changed(t: Tensor) -> Tensor:
    if t.dtype == torch.bool:
        return t.logical_not()
    return torch.where(t == 7, torch.full_like(t, 9), torch.full_like(t, 7))


def _changed(now: Tensor, before: Tensor) -> Tensor:
    same = now.cpu() == before.cpu()
    if now.is_floating_point():
        same |= now.cpu().isnan() & before.cpu().isnan()
    return ~same


def compare_effects(i: int, want: Effects, got: Effects, n_inputs: int) -> str | None:
    """None when writing into output `i` did to xfuse's tensors what it did to eager's (the
    first `n_inputs` masks are the inputs', the rest the outputs')."""
    if isinstance(want, str) or isinstance(got, str):
        if isinstance(want, str) and isinstance(got, str):
            return None
        return f"writing into output {i}: eager {_effect(want)}, xfuse {_effect(got)}"
    for j, (w, g) in enumerate(zip(want, got, strict=True)):
        if not torch.equal(w, g):
            what = f"input {j}" if j < n_inputs else f"output {j - n_inputs}"
            return (
                f"writing into output {i} changes {what} at {int(g.sum())} elements, "
                f"eager at {int(w.sum())}"
            )
    return None


def _effect(effects: Effects) -> str:
    return effects if isinstance(effects, str) else "allows it"


class _RoundedTo(torch.autograd.Function):
    """A program's cast to f16/bf16 in the f64 run: the value rounded as the cast rounds it,
    kept in f64; its gradient passes through unrounded (the reference's backward stays f64)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, dtype: torch.dtype) -> Tensor:
        return x.to(dtype).to(torch.float64)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


HALF_DTYPES = (torch.float16, torch.bfloat16)


class Float64Casts(torch.overrides.TorchFunctionMode):
    """For the f64 reference run: `.to(<floating dtype>)` casts to f64 instead, so that a
    program's own casts to f16/bf16/f32 do not make the reference as coarse as eager: a cast
    to f16/bf16 rounds its values as the program's cast does (its inputs to what follows are
    that dtype's values in every run), what follows is computed in f64. A cast
    that makes a new tensor in eager makes one here too, where the tensor is f64 already (an
    in-place op on the cast then leaves its input alone, as in eager); an f64 tensor of this
    run is taken for eager's f32 (the inputs and the program's floats are f32 there), so its
    cast to f32 stays the tensor itself, as eager's no-op cast does."""

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is not torch.Tensor.to:
            return func(*args, **kwargs)
        source = args[0] if args else None
        wanted = [a for a in (*args[1:], kwargs.get("dtype")) if isinstance(a, torch.dtype)]
        new = isinstance(source, torch.Tensor) and any(d != _eager_dtype(source) for d in wanted)
        args = tuple(_f64_if_float(a) for a in args)
        if "dtype" in kwargs:
            kwargs["dtype"] = _f64_if_float(kwargs["dtype"])
        result = func(*args, **kwargs)
        half = [d for d in wanted if d in HALF_DTYPES]
        if half and isinstance(result, Tensor) and result.is_floating_point():
            return _RoundedTo.apply(result, half[0])
        return result.clone() if new and result is source else result


def _eager_dtype(t: Tensor) -> torch.dtype:
    """The dtype `t` of the f64 reference run most likely has in eager: f32 for f64."""
    return torch.float32 if t.dtype == torch.float64 else t.dtype


def _f64_if_float(x: Any) -> Any:
    return torch.float64 if isinstance(x, torch.dtype) and x.is_floating_point else x


def available_devices(requested: str | None = None) -> list[str]:
    """cpu, plus cuda where torch sees a GPU and pycuda imports (or just `requested`)."""
    if requested is not None:
        return [requested]
    devices = ["cpu"]
    if torch.cuda.is_available():
        try:
            import pycuda  # noqa: F401  # pyright: ignore[reportMissingImports]

            devices.append("cuda")
        except ImportError:
            pass
    return devices


def check_source(
    source: str,
    devices: Sequence[str] | None = None,
    pipeline: str = DEFAULT_PIPELINE,
    loop_interpreter: bool = True,
    semantics: bool = False,
) -> Outcome:
    """Run a program's source through eager and xfuse; never raises for a failure. With
    `semantics`, also what outputs alias (`Differential.check_aliasing`)."""
    devices = available_devices() if devices is None else devices
    try:
        return Differential(source, devices, pipeline, loop_interpreter, semantics).run()
    except Exception as e:  # the harness itself: report it, do not stop the fuzzer
        return Outcome("fail", "harness", _one_line(e) + _where(e))
