"""
Pass pipelines from text, the same syntax as `xfuse-opt -p`:

    >>> p = xfuse.pipeline("decompose,fuse-greedy{arg-limit=64}")
    >>> p(module)  # in place; verifies the IR after every pass

Pass names are xfuse's passes (`xfuse.passes.get_all_passes()`) and every pass xDSL
registers (`canonicalize`, `cse`, ...). Errors are `PipelineError`s with one-line messages:
an unknown pass or option, or an option value the pass cannot use (the rule declared with the option: e.g.
`fuse-scored{window=-1}`), when the pipeline is built, `InvalidIRError` (naming the pass that
produced the invalid IR and the op that does not verify) when it runs.

`compile_pipeline(device, options)` is the pipeline `xfuse.compile` runs: `DEFAULT_PIPELINE` (or
the text given instead) with the device's own passes after `decompose`. The fuzzer's runner and
the bisector build theirs with it too, and its `description` keys the fused-program cache.

Import names from this module with `from xfuse.pipeline import Pipeline`: the package attribute
`xfuse.pipeline` is the function below, not this module.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any, Literal, Union, cast, get_args, get_origin, get_type_hints

from xdsl.context import Context
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.universe import Universe
from xdsl.utils.arg_spec import ArgSpec, ParameterListType, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, VerifyException
from xdsl.utils.hints import isa

from xfuse.errors import PipelineError, XfuseError
from xfuse.ir.context import make_context
from xfuse.ir.diagnostics import error_line, first_invalid_op, op_message
from xfuse.passes import get_all_passes
from xfuse.passes.options import option_rule

if TYPE_CHECKING:
    import torch

PassFactories = Mapping[str, Callable[[], type[ModulePass]]]
"""Pass name -> factory of the pass class, the form `xDSLOptMain.available_passes` uses."""

OpLocator = Callable[[Operation], str | None]
"""Where an op came from, as `file:line:col`, or None when that is not known."""

PassObserver = Callable[[ModulePass | None, ModuleOp, ModulePass | None], None]
"""Called around every pass with (the pass that ran, the module, the pass about to run)."""


class InvalidIRError(PipelineError, VerifyException):
    """The IR does not verify: the input (`pass_name` None) or the output of pass `pass_name`.
    Its message is one line, `file:line:col: error: ...` when the op's location is known."""

    def __init__(
        self, pass_name: str | None, op: Operation | None, location: str | None, message: str
    ):
        self.pass_name = pass_name
        self.op = op
        self.location = location
        self.message = message
        blame = f"pass '{pass_name}' produced invalid IR: " if pass_name is not None else ""
        super().__init__(error_line(blame + op_message(op, message), location))


class PassFailedError(PipelineError, DiagnosticException):
    """A pass reported that it cannot transform the module (a `DiagnosticException`)."""

    def __init__(self, pass_name: str, message: str):
        self.pass_name = pass_name
        first_line = next((line for line in message.splitlines() if line.strip()), "")
        super().__init__(f"error: pass '{pass_name}' failed: {first_line.strip()}")


@cache
def _xdsl_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    return dict(Universe.get_multiverse().all_passes)


def known_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every pass a pipeline may name: xDSL's, then xfuse's (which win on a clash)."""
    return {**_xdsl_passes(), **get_all_passes()}


def _unknown_pass_message(name: str, available: PassFactories) -> str:
    ours = sorted(set(available) - set(_xdsl_passes()))
    close = difflib.get_close_matches(name, list(available), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (
        f"unknown pass '{name}'{hint}; xfuse passes: {', '.join(ours) or 'none'}; "
        "xDSL's passes are also available (`xfuse-opt --help` lists them all)"
    )


def _option_names(pass_class: type[ModulePass]) -> list[str]:
    return [f.name.replace("_", "-") for f in dataclasses.fields(pass_class) if f.init]


def _check_options(pass_class: type[ModulePass], spec: ArgSpec) -> None:
    known = _option_names(pass_class)
    callables = _callable_options(pass_class)
    for option in spec.normalize_parameter_names().parameters:
        name = option.replace("_", "-")
        if name not in known:
            raise PipelineError(
                f"pass '{spec.name}' has no option '{name}' "
                f"(its options: {', '.join(known) or 'none'})"
            )
        if name in callables:
            raise PipelineError(
                f"pass '{spec.name}': option '{name}' is a Python callable and has no textual "
                f"form (give it from Python: {pass_class.__name__}({name.replace('-', '_')}=...))"
            )


# ---------------------------------------------------------------------------------------------
# Option values
# ---------------------------------------------------------------------------------------------


def _annotation(f: dataclasses.Field[object]) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def _callable_options(pass_class: type[ModulePass]) -> set[str]:
    return {
        f.name.replace("_", "-")
        for f in dataclasses.fields(pass_class)
        if f.init and "Callable" in _annotation(f)
    }


def check_pass_options(module_pass: ModulePass) -> None:
    """Raise `PipelineError` (one line naming the pass and the option) for an option value the
    pass cannot use: an integer out of the range its field declares (`xfuse.passes.options.option`), a bool where an integer is
    expected, or a non-callable where a callable is."""
    for f in dataclasses.fields(module_pass):
        if not f.init:
            continue
        value = getattr(module_pass, f.name)
        option = f.name.replace("_", "-")
        where = f"pass '{module_pass.name}': option '{option}'"
        annotation = _annotation(f)
        if "Callable" in annotation:
            if value is not None and not callable(value):
                raise PipelineError(
                    f"{where} must be a callable (an op -> bool predicate) or None, "
                    f"found {type(value).__name__} {value!r}"
                )
        elif annotation == "int":
            rule = option_rule(f)
            if isinstance(value, bool) or not isinstance(value, int):
                shown = str(value).lower() if isinstance(value, bool) else repr(value)
                raise PipelineError(f"{where} must be an integer, found {shown}")
            if rule is not None and not rule.accepts(value):
                raise PipelineError(f"{where} must be {rule.expected}, found {value}")


def _describe(hint: object) -> str:
    """What a value of type `hint` is, as a pipeline spec writes it ("an integer")."""
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if isinstance(hint, type) and hint in simple:
        return simple[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, UnionType):
        return " or ".join(_describe(a) for a in args if a is not NoneType)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"a comma-separated list ({_describe(args[0])} each)"
    return f"a value of type {getattr(hint, '__name__', hint)}"


def _spec_text(values: ParameterListType) -> str:
    """Option values as a pipeline spec writes them: `true`, `3`, `'abc'`, `1,2`."""
    return ",".join(str(v).lower() if isinstance(v, bool) else repr(v) for v in values)


def _fits(values: ParameterListType, hint: Any) -> bool:
    """Whether `from_spec` takes `values` for a field of type `hint` (xDSL's rule)."""
    if not values:
        return NoneType in get_args(hint)
    return (len(values) == 1 and isa(values[0], hint)) or isa(values, hint)


def _option_type_error(pass_class: type[ModulePass], spec: ArgSpec) -> str | None:
    """One line for the first option of `spec` whose value has the wrong type, if any."""
    hints = get_type_hints(pass_class)
    for option, values in spec.normalize_parameter_names().parameters.items():
        hint = hints.get(option)
        if hint is not None and not _fits(values, hint):
            shown = _spec_text(values) or "no value"
            name = option.replace("_", "-")
            return f"pass '{spec.name}': option '{name}' must be {_describe(hint)}, found {shown}"
    return None


def _spec_syntax_message(error: ArgSpecParseError, spec: str) -> str:
    # xDSL's message is a header, a location line, the spec, a caret line, then the reason.
    lines = [line for line in str(error).splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else "malformed pipeline"
    column = lines[1].rsplit(":", 1)[-1] if len(lines) > 1 else "?"
    return f"invalid pass pipeline '{spec}' at column {column}: {reason}"


def parse_passes(spec: str, available: PassFactories | None = None) -> tuple[ModulePass, ...]:
    """The passes a pipeline spec names, configured with its options."""
    available = known_passes() if available is None else available
    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        raise PipelineError(_spec_syntax_message(e, spec)) from None
    if spec.rstrip().endswith(","):  # xDSL's parser reads a trailing comma as the end
        column = len(spec.rstrip()) + 1
        raise PipelineError(
            f"invalid pass pipeline '{spec}' at column {column}: Expected pass name here"
        )
    passes: list[ModulePass] = []
    for pass_spec in specs:
        if pass_spec.name not in available:
            raise PipelineError(_unknown_pass_message(pass_spec.name, available))
        pass_class = available[pass_spec.name]()
        _check_options(pass_class, pass_spec)
        try:
            module_pass = pass_class.from_pass_spec(pass_spec)
        except (ValueError, TypeError) as e:
            message = _option_type_error(pass_class, pass_spec) or f"pass '{pass_spec.name}': {e}"
            raise PipelineError(message) from None
        check_pass_options(module_pass)
        passes.append(module_pass)
    return tuple(passes)


def file_line_col(op: Operation) -> str | None:
    """The op's `loc("file":line:col)`, if it carries one."""
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return None


def verify_module(
    module: ModuleOp, pass_name: str | None = None, locate: OpLocator = file_line_col
) -> None:
    """Verify `module` (the output of `pass_name`, or an input when None); on failure raise
    `InvalidIRError` naming the pass, the op and its location."""
    try:
        module.verify()
    except VerifyException as e:
        culprit = first_invalid_op(module)
        if culprit is None:
            raise InvalidIRError(pass_name, None, None, str(e)) from None
        op, op_error = culprit
        raise InvalidIRError(pass_name, op, locate(op), str(op_error)) from None


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order on a module, in place, verifying the IR before the first and after
    every pass when `verify_each` is set. Call it (or `apply`) with a module.

    With `verify_end` instead (`verify_each` off), the result is verified once; when it does
    not verify, the passes run again on a copy of the input, verifying after each, so that the
    error still names the pass that broke the IR. `xfuse.compile` runs so: one verification of
    a large program's IR instead of one per pass."""

    passes: tuple[ModulePass, ...]
    verify_each: bool = True
    verify_end: bool = False
    locate: OpLocator = file_line_col
    observer: PassObserver | None = None
    ctx: Context = field(default_factory=make_context, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Passes made in Python (not parsed from text) get the same option checks.
        for module_pass in self.passes:
            check_pass_options(module_pass)

    def apply(self, module: ModuleOp) -> ModuleOp:
        if self.verify_end and not self.verify_each:
            original = module.clone()
            self._apply(module)
            try:
                module.verify()
            except VerifyException:
                replace(self, verify_each=True, verify_end=False, observer=None).apply(original)
                # The passes did not repeat their error: blame the pipeline as a whole.
                verify_module(module, str(self), self.locate)
            return module
        return self._apply(module)

    def _apply(self, module: ModuleOp) -> ModuleOp:
        self._between(None, module, self.passes[0] if self.passes else None)
        for i, module_pass in enumerate(self.passes):
            try:
                module_pass.apply(self.ctx, module)
            except PipelineError:
                raise
            except DiagnosticException as e:
                raise PassFailedError(module_pass.name, str(e)) from e
            after = self.passes[i + 1] if i + 1 < len(self.passes) else None
            self._between(module_pass, module, after)
        return module

    __call__ = apply

    def verified_at_end(self) -> Pipeline:
        """The pipeline with its result verified once at the end (`verify_end`), not after
        each pass: as `xfuse.compile` and symbolic programs run their fusion passes."""
        return replace(self, verify_each=False, verify_end=True)

    def _between(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        if self.verify_each:
            verify_module(module, previous.name if previous else None, self.locate)
        if self.observer is not None:
            self.observer(previous, module, following)

    def __str__(self) -> str:
        return ",".join(str(p.pipeline_pass_spec()) for p in self.passes)

    def description(self) -> str:
        """Every pass with every option, defaults included, as pipeline text: what two runs
        must share to make the same program (the fused-program cache's key holds it)."""
        return ",".join(str(p.pipeline_pass_spec(include_default=True)) for p in self.passes)


def pipeline(
    spec: str,
    verify_each: bool = True,
    *,
    passes: PassFactories | None = None,
) -> Pipeline:
    """A `Pipeline` from `xfuse-opt -p` syntax, e.g. "decompose,fuse-greedy{arg-limit=64}".
    `passes` replaces the passes it may name (default: `known_passes()`)."""
    return Pipeline(parse_passes(spec, passes), verify_each)


# ---------------------------------------------------------------------------------------------
# The pipeline xfuse.compile runs
# ---------------------------------------------------------------------------------------------

AFTER_DEVICE_PASSES = "simplify"
"""What every fusion pipeline runs after `decompose` and the device's passes, before it fuses:
xfuse.compile's (`DEFAULT_PIPELINE`, whose device passes `compile_pipeline` puts after
`decompose`) and a symbolic program's (`xfuse.runtime.symbolic.DEFAULT_PASSES`). `simplify`
rewrites sums of one-hots (the cross-entropy backward), which no device pass makes or reads
(those rewrite convolutions, attention and matmuls), so one position serves both; after them
it sees the graph that fusion will."""

DEFAULT_PIPELINE = (
    f"decompose,{AFTER_DEVICE_PASSES},split-reductions,reduction-cse,"
    "fuse-scored,group-cleanup,fold-linear"
)
"""The fusion pipeline `xfuse.compile` runs unless given another (`xfuse-opt -p` text).
`reduction-cse` runs after `split-reductions`, which splits repeated reductions alike: both
stages of a repeated sum then go, and what reads the sums (the division of a mean) stays one
chain per reader, as fusion had it before."""

CHANNELS_LAST_ENV = "XFUSE_CHANNELS_LAST"
"""`1`, `0` or `auto`: `channels_last` for a compile that gives none (`channels_last_setting`)."""

GEMM_WAYS_ENV = "XFUSE_GEMM_WAYS"
"""`1`, `0` or `auto`: `PipelineOptions.gemm_ways` where it is None (`gemm_ways_setting`)."""

RENAMED_ENVS = ("XFUSE_ONEDNN_GEMM", "XFUSE_CPU_GEMM")
"""Former names of `XFUSE_GEMM_WAYS`: a compile refuses to run while one is set, rather than
leave the user's setting silently unread."""


@dataclass(frozen=True)
class PipelineOptions:
    """What the pipeline `xfuse.compile` runs is made of, besides the device."""

    spec: str = DEFAULT_PIPELINE
    """The fusion pipeline, `xfuse-opt -p` text (`compile`'s `pipeline`)."""
    channels_last: bool | None = None
    """`compile`'s `channels_last`: True, False, or None for the device's default
    (`layout_pass`)."""
    library: tuple[str, ...] = ()
    """The depthwise convolutions (by `depthwise_stencil.signature`) that stay library calls:
    those measured faster so (`xfuse.choices`)."""
    unpadded: tuple[str, ...] = ()
    """The 16-bit products (by `pad_matmul.PaddedProduct.signature`) that `pad-matmul` leaves
    unpadded: those measured not clearly faster padded (`xfuse.choices`)."""
    without: tuple[str, ...] = ()
    """Device passes left out, by name (a benchmark's column without `depthwise-stencil`)."""
    gemm_ways: bool | None = None
    """Which products of a weight run another way than torch's call (`xfuse.runtime.gemm_ways`:
    on the CPU oneDNN's GEMM or MKL's in blocks of the weight's rows, on CUDA the bias added
    apart): True every one, False none (AOTAutograd's training parts, `xfuse.aot`), None `XFUSE_GEMM_WAYS`
    (`1`, `0`) where set, else (`auto`) those measured faster so
    (`xfuse.choices.chosen_gemms`)."""


def device_type(device: str | torch.device) -> str:
    """`cpu` or `cuda` for a device or its name (`cuda:1`), without importing torch."""
    return device.split(":")[0] if isinstance(device, str) else device.type


def channels_last_setting(asked: bool | None) -> bool | None:
    """`asked`, or where it is None the `XFUSE_CHANNELS_LAST` setting: `1` True, `0` False,
    `auto` (and unset) None; any other value is an `XfuseError`."""
    return _switch(asked, CHANNELS_LAST_ENV)


def gemm_ways_setting(asked: bool | None) -> bool | None:
    """`asked`, or where it is None the `XFUSE_GEMM_WAYS` setting, read as
    `channels_last_setting` reads its own; an `XfuseError` while a former name of it
    (`RENAMED_ENVS`) is set."""
    for old in RENAMED_ENVS:
        if old in os.environ:
            raise XfuseError(f"{old} is now called {GEMM_WAYS_ENV}: set that instead")
    return _switch(asked, GEMM_WAYS_ENV)


def _switch(asked: bool | None, env: str) -> bool | None:
    if asked is not None:
        return asked
    setting = os.environ.get(env, "auto").strip().lower()
    if setting not in ("0", "1", "auto"):
        raise XfuseError(f"{env} must be 0, 1 or auto, found {setting!r}")
    return None if setting == "auto" else setting == "1"


def layout_pass(asked: bool | None, device: str | torch.device) -> ModulePass | None:
    """The `channels-last` pass that `xfuse.compile(..., channels_last=asked)` runs, or None.

    True: every program with a 2-D convolution goes channels-last (`force`); False: none does;
    None (the default): `XFUSE_CHANNELS_LAST` (`1`, `0` or `auto`) when set, else auto
    (`layout_verdict`): on CUDA, programs of two or more f16/bf16 convolutions that favour it
    as Inductor weighs them (cuDNN runs f16/bf16 convolutions in NHWC, and converts NCHW
    tensors around each one; its NHWC f32 kernels are slower, and so is one strided patch
    convolution); on the CPU every program with a convolution, as Inductor's (oneDNN reorders
    NCHW activations around each convolution)."""
    from xfuse.passes.transforms.channels_last import ChannelsLastPass

    setting = channels_last_setting(asked)
    if setting is False:
        return None
    return ChannelsLastPass(force=setting is True, target=device_type(device))


def device_passes(
    channels_last: bool | None,
    device: str | torch.device,
    library: tuple[str, ...] = (),
    unpadded: tuple[str, ...] = (),
) -> tuple[ModulePass, ...]:
    """What `xfuse.compile` runs after `decompose` for `device`: `depthwise-stencil`
    (depthwise convolutions fuse with their neighbours instead of running as library calls;
    those of `library` stay library calls), the `channels-last` pass of `layout_pass` (which
    weighs the convolutions left), on the CPU without it `convolution-matmul` (a batch-1
    convolution as one matrix product: a 1x1 one that torch runs as one product, that product;
    a larger window with few output pixels per channel, its patches times the weight),
    `attention-mask` (attention drops a constant mask that hides nothing and runs a causal one
    as `is_causal`, as eager's call had them), and on the CPU `attention-gqa` (attention reads
    repeated key and value heads unrepeated: bit for bit the same there; on CUDA a mask and
    `enable_gqa` together leave torch's fused kernels), and on CUDA `pad-matmul` (16-bit
    products whose rows are not whole 16-byte vectors run padded: cuBLAS has no fast kernel
    for such rows) and `convolution-bias` (library convolutions leave their bias to a graph
    add that fuses with what reads them, where cuDNN's would add it in a kernel of its own)."""
    from xfuse.passes.transforms.attention_gqa import AttentionGQAPass
    from xfuse.passes.transforms.attention_mask import AttentionMaskPass
    from xfuse.passes.transforms.convolution_bias import ConvolutionBiasPass
    from xfuse.passes.transforms.convolution_matmul import ConvolutionMatmulPass
    from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass
    from xfuse.passes.transforms.pad_matmul import PadMatmulPass

    layout = layout_pass(channels_last, device)
    cpu = device_type(device) == "cpu"
    gqa = AttentionGQAPass() if cpu else None
    matmul = ConvolutionMatmulPass() if cpu and layout is None else None
    stencil = DepthwiseStencilPass(library=tuple(library))
    pad = None if cpu else PadMatmulPass(unpadded=tuple(unpadded))
    bias = None if cpu else ConvolutionBiasPass()
    passes = (stencil, bias, layout, matmul, AttentionMaskPass(), gqa, pad)
    return tuple(p for p in passes if p is not None)


def after_decompose(
    passes: tuple[ModulePass, ...], extra: Sequence[ModulePass]
) -> tuple[ModulePass, ...]:
    """`passes` with `extra` after the last `decompose` (first when there is none)."""
    if not extra:
        return passes
    at = max((i + 1 for i, p in enumerate(passes) if p.name == "decompose"), default=0)
    return (*passes[:at], *extra, *passes[at:])


def compile_device_passes(
    device: str | torch.device, options: PipelineOptions
) -> tuple[ModulePass, ...]:
    """The device's passes of `compile_pipeline`, those `options.without` names left out."""
    passes = device_passes(options.channels_last, device, options.library, options.unpadded)
    return tuple(p for p in passes if p.name not in options.without)


def compile_pipeline(
    device: str | torch.device,
    options: PipelineOptions = PipelineOptions(),  # noqa: B008 - frozen, never mutated
    *,
    passes: PassFactories | None = None,
) -> Pipeline:
    """The pipeline `xfuse.compile` runs for `device`: the passes `options.spec` names, with
    the device's own (`compile_device_passes`) after its last `decompose`. New pass instances
    each call (fusion passes keep their decisions on themselves). `passes` replaces the passes
    the spec may name (default: `known_passes()`)."""
    spec = for_target(parse_passes(options.spec, passes), device)
    return Pipeline(after_decompose(spec, compile_device_passes(device, options)))


def for_target(
    passes: tuple[ModulePass, ...], device: str | torch.device
) -> tuple[ModulePass, ...]:
    """`passes` with their `target` option set to `device`'s type where they take it from the
    device (`TARGET_FROM_DEVICE`: `split-reductions`, whose choices depend on it; not
    `lower-to-llvm`, whose target names the kernels' calling convention)."""
    target = device_type(device)
    return tuple(_with_target(p, target) for p in passes)


def _with_target(module_pass: ModulePass, target: str) -> ModulePass:
    if not getattr(module_pass, "TARGET_FROM_DEVICE", False):
        return module_pass
    configured: ModulePass = dataclasses.replace(cast(Any, module_pass), target=target)
    return configured
