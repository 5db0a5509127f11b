"""Reference interpreters: `graph` (the oracle every pass is checked against) and `loops`."""

from xfuse.lazy import submodule_access

__getattr__, __dir__ = submodule_access(__name__, __path__)
