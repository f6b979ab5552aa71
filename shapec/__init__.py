"""shapec: a declarative language for reward shaping in RL post-training of reasoning models."""

from .api import CompiledModule, check_file, check_source, compile_file, compile_str, load
from .syntax.source import Diagnostic, ShapeError

__version__ = "0.1.0"
__all__ = ["compile_str", "compile_file", "load", "check_file", "check_source", "CompiledModule",
           "Diagnostic", "ShapeError", "__version__"]
