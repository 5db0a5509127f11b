"""The IR's shared pieces: dtypes, attribute names, the context and parser, diagnostics."""

from xfuse.lazy import submodule_access

__getattr__, __dir__ = submodule_access(__name__, __path__)
