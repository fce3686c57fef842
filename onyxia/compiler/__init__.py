"""The compiler: a staged pipeline of passes from IrGraph to CompiledModel (no GPU needed)."""

from onyxia.compiler.pass_api import Pass, PassResult, Stage
from onyxia.compiler.pipeline import CompilerPipeline, PassRecord, compile

__all__ = ["CompilerPipeline", "Pass", "PassRecord", "PassResult", "Stage", "compile"]
