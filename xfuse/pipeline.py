"""
Pass pipelines from text, the same syntax as `xfuse-opt -p`:

    >>> p = xfuse.pipeline("decompose,fuse-greedy{arg-limit=64}")
    >>> p(module)  # in place; verifies the IR after every pass

Pass names are xfuse's passes (`xfuse.passes.get_all_passes()`) and every pass xDSL
registers (`canonicalize`, `cse`, ...). Errors are `PipelineError`s with one-line messages:
an unknown pass or option, or an option value the pass cannot use (the rule declared with the option: e.g.
`fuse-scored{window=-1}`), when the pipeline is built, `InvalidIRError` (naming the pass that
produced the invalid IR and the op that does not verify) when it runs.

Import names from this module with `from xfuse.pipeline import Pipeline`: the package attribute
`xfuse.pipeline` is the function below, not this module.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from xdsl.context import Context
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.universe import Universe
from xdsl.utils.arg_spec import ArgSpec, ParameterListType, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, VerifyException
from xdsl.utils.hints import isa

from xfuse.errors import PipelineError
from xfuse.ir.context import make_context
from xfuse.ir.diagnostics import error_line, first_invalid_op, op_message
from xfuse.passes import get_all_passes
from xfuse.passes.options import option_rule

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
    error still names the pass that broke the IR. `xfuse.compile` runs so: a verification of
    MobileNetV2's IR takes about 75 ms, and there were eight of them in its warm start."""

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

    def _between(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        if self.verify_each:
            verify_module(module, previous.name if previous else None, self.locate)
        if self.observer is not None:
            self.observer(previous, module, following)

    def __str__(self) -> str:
        return ",".join(str(p.pipeline_pass_spec()) for p in self.passes)


def pipeline(
    spec: str,
    verify_each: bool = True,
    *,
    passes: PassFactories | None = None,
) -> Pipeline:
    """A `Pipeline` from `xfuse-opt -p` syntax, e.g. "decompose,fuse-greedy{arg-limit=64}".
    `passes` replaces the passes it may name (default: `known_passes()`)."""
    return Pipeline(parse_passes(spec, passes), verify_each)
