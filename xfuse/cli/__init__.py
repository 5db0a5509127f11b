"""The command-line tools: `xfuse-opt` (`opt`) and `xfuse-fuzz` (`fuzz`)."""

from xfuse.lazy import submodule_access

__getattr__, __dir__ = submodule_access(__name__, __path__)
