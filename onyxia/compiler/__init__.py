"""The compiler: a staged pipeline of passes from IrGraph to CompiledModel (no GPU needed)."""

from onyxia.compiler.context import CompileContext
from onyxia.compiler.pass_api import Pass, PassResult, Stage
from onyxia.compiler.pipeline import CompilerPipeline, PassRecord, compile_graph

__all__ = ["CompileContext", "CompilerPipeline", "Pass", "PassRecord", "PassResult", "Stage", "compile_graph"]
