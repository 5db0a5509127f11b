"""The torch frontend: torch.export programs imported into the `graph` dialect."""

from xfuse.frontend.importer import ImportedProgram, import_module, import_program
from xfuse.frontend.lowering import UnsupportedProgram

__all__ = ["ImportedProgram", "UnsupportedProgram", "import_module", "import_program"]
