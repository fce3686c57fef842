"""SymbolicResolutionPass: bind the model's symbols to the values given at compile time."""

from __future__ import annotations

from collections.abc import Mapping

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.errors import DimensionError
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import dim_symbols, evaluate_dim

RESERVED_PREFIX = "onyxia_"  # symbols onyxia itself introduces (llm.ops.LOGITS_GATE)


class SymbolicResolutionPass(Pass):
    """Binds symbols for the rest of the pipeline.

    1. Checks every given value is a non-negative int and every static name is given; a given
       symbol must be used by an input, except onyxia's own (RESERVED_PREFIX: operators such as
       the LLM session's introduce them in their output shapes).
    2. Checks every symbol used by an input shape has a value, naming the input if not.
    The values (`ctx.dims`: buffer capacities, folding) and static symbols (`ctx.static`:
    baked into shaders as defs) are the context's; shapes keep their symbols so the plan stays
    valid for other values of the dynamic ones.
    """

    name = "symbolic-resolution"
    stage = Stage.RESOLUTION

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        dims, static = ctx.dims, ctx.static
        used = input_symbols(graph)
        for name, value in dims.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DimensionError(f"dimension '{name}' must be a non-negative integer, got {value!r}")
            if name not in used and not name.startswith(RESERVED_PREFIX):
                raise unknown_dimension(graph, name, used)
        for name in static:
            if name not in dims:
                raise DimensionError(f"static dimension '{name}' has no value; give it with the dims")
        missing = sorted(sym for sym in used if sym not in dims)
        if missing:
            # All of them at once, with the names the model has: unnamed dims get made-up names
            # (x_dim0) that the user cannot guess.
            which = ", ".join(f"'{sym}' (input '{used[sym]}')" for sym in missing)
            example = " ".join(f"--dim {sym}=N" for sym in missing)
            given = ", ".join(f"'{sym}': N" for sym in missing)
            raise DimensionError(f"dimension{'s' if len(missing) > 1 else ''} {which} "
                                 f"{'are' if len(missing) > 1 else 'is'} not given (pass {example}, "
                                 f"or dims={{{given}}}); the model's dimensions: {', '.join(sorted(used))}")
        for tid in graph.inputs:
            for i, d in enumerate(graph.tensor(tid).shape or ()):
                if evaluate_dim(d, dims) < 0:
                    raise DimensionError(f"input '{tid}' dim {i} ({d}) is negative for the dims given")
        return False


def input_symbols(graph: IrGraph) -> dict[str, str]:
    """Each symbol of the graph's input shapes -> the first input using it."""
    used: dict[str, str] = {}
    for tid in graph.inputs:
        for d in graph.tensor(tid).shape or ():
            for s in dim_symbols(d):
                used.setdefault(s, tid)
    return used


def unknown_dimension(graph: IrGraph, name: str, used: Mapping[str, str]) -> DimensionError:
    """The error for dims naming `name`, which no input shape uses: the model's symbols, and
    its sequence/optional inputs, whose element sizes come from what is fed, never from dims."""
    known = ", ".join(sorted(used)) or "none"
    containers = [f"{graph.tensor(t).container} input '{graph.tensor(t).name}'" for t in graph.inputs
                  if graph.tensor(t).container]
    values = "value" if len(containers) == 1 else "values"
    hint = (f"; the element sizes of {', '.join(containers)} come from the {values} fed at run time, "
            "not from dims") if containers else ""
    return DimensionError(f"dimension '{name}' is not used by the model (its symbols: {known}){hint}")

