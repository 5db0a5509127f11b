"""What fusion did: the summary table, the picture (DOT) and its rendering."""

from xfuse.lazy import submodule_access

__getattr__, __dir__ = submodule_access(__name__, __path__)
