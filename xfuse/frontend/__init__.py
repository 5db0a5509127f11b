"""The torch frontend: torch.export programs imported into the `graph` dialect."""

from xfuse.errors import UnsupportedProgram
from xfuse.frontend.importer import ImportedProgram, import_module, import_program

__all__ = ["ImportedProgram", "UnsupportedProgram", "import_module", "import_program"]
