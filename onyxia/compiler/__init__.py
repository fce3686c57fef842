"""The compiler: a staged pipeline of passes from IrGraph to CompiledModel (no GPU needed)."""

from onyxia.compiler.pipeline import CompilerPipeline, Pass, PassRecord, PassResult, Stage, compile

__all__ = ["CompilerPipeline", "Pass", "PassRecord", "PassResult", "Stage", "compile"]
