"""The torch frontend: torch.export programs imported into the `graph` dialect."""

from xfuse.errors import UnsupportedProgram
from xfuse.frontend.importer import ImportedProgram, import_module, import_program
from xfuse.lazy import submodule_access

__all__ = ["ImportedProgram", "UnsupportedProgram", "import_module", "import_program"]

__getattr__, __dir__ = submodule_access(__name__, __path__)
