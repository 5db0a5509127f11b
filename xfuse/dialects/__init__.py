"""xfuse's dialects: `graph` (tensor ops), `fusion` (groups), and what their ops declare."""

from xfuse.lazy import submodule_access

__getattr__, __dir__ = submodule_access(__name__, __path__)
