"""Running compiled programs: the executor and its steps, the kernel cache, the fallback."""

from xfuse.lazy import submodule_access

__getattr__, __dir__ = submodule_access(__name__, __path__)
