"""
Every error and warning xfuse raises on purpose, under one root: `XfuseError` (warnings are
`XfuseWarning`s, which are `XfuseError`s too). Each message is one line a user can act on.

Errors that more than one level of the pipeline raises or catches live here; an error of one
module only (`LoopLoweringError`, `InvalidIRError`, ...) is defined in that module, under one of
these. This module imports nothing of xfuse, so every level may import it.
"""

from __future__ import annotations


class XfuseError(Exception):
    """The root of every error (and warning) xfuse raises on purpose."""


class XfuseWarning(XfuseError, UserWarning):
    """The root of xfuse's warnings."""


# --- IR and import --------------------------------------------------------------------------


class UnsupportedDtype(XfuseError, TypeError):
    """A dtype that graph tensors cannot hold."""


class UnsupportedArgument(XfuseError, ValueError):
    """A torch argument that has no attribute form (e.g. a Python object)."""


class UnsupportedProgram(XfuseError, ValueError):
    """A program (or one node of it) that xfuse cannot import, with a one-line reason."""


class SymbolicSizeError(UnsupportedProgram):
    """A symbolic size (docs/dynamic-shapes.md) that a stage cannot handle yet: an op whose
    converter or lowering needs static sizes, a size expression that is no polynomial. One
    line naming the op."""


class SizeCheckError(SymbolicSizeError, RuntimeError):
    """A call's sizes break a relation or condition of a symbolic program's table: an equality
    or inequality of sizes that the traced code checked (a loss's input rows against its
    targets, a gather's index sizes against its input's), where eager's kernels raise a
    `RuntimeError`, as this one is too."""


class IRParseError(XfuseError, ValueError):
    """IR text that does not parse or does not verify (`xfuse.parse`): one line,
    `name:line:col: error: message`; xDSL's own error is the `__cause__`."""


class InterpretError(XfuseError, RuntimeError):
    """The interpreter met an op it does not know or inputs that do not fit."""


class PipelineError(XfuseError):
    """A pipeline that cannot be built, or a pass that produced IR that does not verify."""


# --- code generation ------------------------------------------------------------------------


class CodegenError(XfuseError, RuntimeError):
    """A kernel could not be compiled (unsupported op, LLVM error); the runtime falls back."""


class CUDAUnavailable(XfuseError, RuntimeError):
    """CUDA kernels cannot run here (no pycuda, no GPU); PTX generation still works."""


class CUDALaunchError(XfuseError, RuntimeError):
    """A kernel failed to launch or to run."""


# --- runtime and API ------------------------------------------------------------------------


class UnsupportedInputError(XfuseError, TypeError):
    """An input that compiled programs cannot take (sparse, complex, wrong device or count)."""


class ModuleChangedError(UnsupportedInputError):
    """A compiled module's submodules are other objects than those it was compiled with."""


class InputDeviceError(UnsupportedInputError):
    """A tensor of a call (an input, a parameter or a buffer) on another device than the
    program's, where eager accepts the call (a CPU index it moves for the op; a CPU scalar
    the program moves itself);
    where eager refuses it, its own error is raised instead (`EagerArgumentError`)."""


class IndexOutOfRangeError(XfuseError, IndexError, RuntimeError):
    """An index tensor holds an index outside the indexed dim (`graph.gather`): eager raises
    IndexError (embedding, `x[idx]`) or RuntimeError (gather, index_select); this is both."""

    @classmethod
    def in_kernel(cls, kernel: str) -> IndexOutOfRangeError:
        """The error of a kernel whose error flag was set (docs/contracts.md)."""
        return cls(f"index out of range in self (an index tensor read by {kernel})")


class ExportError(XfuseError):
    """The model or function could not be imported (torch.export failed)."""


class InputMismatchError(ExportError, RuntimeError):
    """A call whose inputs the model refuses though its example inputs export (a wrong shape:
    eager raises RuntimeError there too): torch's reason, with the inputs given and expected."""


class InvalidArgumentError(XfuseError, ValueError, TypeError):
    """An argument of the public API that it does not take (an unknown device, options that
    are no dict): a ValueError or TypeError, as Python's own checks would raise."""


class EagerFallbackError(XfuseError, RuntimeError):
    """Strict mode (`fallback="error"`, `XFUSE_STRICT=1`): a graph or group would run eagerly."""


class RenderError(XfuseError):
    """A picture that cannot be made: an unknown format, or `dot` failed."""


class BisectError(XfuseError):
    """The program cannot be bisected (it does not fail, or cannot be loaded)."""


class KernelCacheWarning(XfuseWarning):
    """A kernel cache entry was corrupt or unreadable and was rebuilt, or the disk is unusable."""


class FallbackWarning(XfuseWarning):
    """A fusion group could not be compiled and runs eagerly instead (results stay right)."""


class DynamicShapesWarning(XfuseWarning):
    """A graph with dynamic shapes is compiled per concrete shape, not once for its size
    symbols, because the symbolic path refused it (results stay right; each new size compiles)."""


class GraphvizMissingWarning(XfuseWarning):
    """Graphviz's `dot` is not installed: the DOT text was written instead of a picture."""


class AutogradUnsupportedError(XfuseError, RuntimeError):
    """A call that needs autograd (grad enabled, an input or parameter requires grad) of a
    program compiled for inference alone (what `xfuse.compile` builds for a call without grad,
    called directly): its results would carry no history. `xfuse.compile`'s own result
    differentiates such calls (`xfuse.differentiable`)."""


class GradientUnsupportedError(AutogradUnsupportedError):
    """A call that needs autograd which xfuse cannot differentiate as eager would (a module
    with a backward hook, a tensor that requires grad but is no input, parameter or buffer, an
    op AOTAutograd cannot differentiate): one line saying why. Under `torch.no_grad()` the
    inference program runs."""


# --- eager's argument rules (`xfuse.frontend.eager_rules`) -------------------------------


class EagerArgumentError(XfuseError):
    """An op's arguments that eager refuses: eager's first line, raised where eager raises."""


class EagerRuntimeError(EagerArgumentError, RuntimeError):
    """Eager refused the arguments with a RuntimeError (mismatched dtypes, most often)."""


class EagerNotImplementedError(EagerArgumentError, NotImplementedError):
    """Eager has no kernel for the dtype (`"addmm_impl_cpu_" not implemented for 'Bool'`)."""


class EagerTypeError(EagerArgumentError, TypeError):
    """Eager refused the arguments with a TypeError."""


class EagerValueError(EagerArgumentError, ValueError):
    """Eager refused the arguments with a ValueError."""


class EagerIndexError(EagerArgumentError, IndexError):
    """Eager refused the arguments with an IndexError (indices of a non-integer dtype)."""
