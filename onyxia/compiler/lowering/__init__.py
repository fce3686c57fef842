"""The lowering from the optimized graph to a CompiledModel; not passes (those rewrite the graph,
under compiler/passes/).

planning.py  plan_model: every live node's steps, the tensor table, the symbolic bindings
ordering.py  the memory-aware order of the planned operations
inplace.py   elementwise maps writing into a dying input's buffer
memory.py    intermediates with disjoint lifetimes sharing buffers
"""

from onyxia.compiler.lowering.planning import plan_model

__all__ = ["plan_model"]
