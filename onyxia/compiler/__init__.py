"""The compiler: a staged pipeline of passes from IrGraph to CompiledModel (no GPU needed).

passes/ holds the Pass classes (one per file), lowering/ the planning that turns the optimized
graph into the plan, subgraphs.py the SubgraphServices operators with subgraphs are lent."""

from onyxia.compiler.context import CompileContext
from onyxia.compiler.pass_api import Pass, PassResult, Stage
from onyxia.compiler.pipeline import CompilerPipeline, PassRecord, compile_graph

__all__ = ["CompileContext", "CompilerPipeline", "Pass", "PassRecord", "PassResult", "Stage", "compile_graph"]
