"""ShapeInferencePass: the dtype and shape of every tensor, in topological order."""

from __future__ import annotations

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.errors import OnyxiaError, ShapeInferenceError
from onyxia.ir.dim_env import DimEnv
from onyxia.ir.graph import IrGraph, Node
from onyxia.ir.shapes import SymDim
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator
from onyxia.operators.registry import check_supported, resolve_operator

# Small values are folded during inference (like ONNX data propagation) because later shapes
# depend on them: Shape → Gather → Concat → Reshape. Big constants wait for ConstantFolding.
PROPAGATE_MAX_ELEMENTS = 4096


def fold_node(graph: IrGraph, env: DimEnv, op: Operator, node: Node, max_elements: int | None) -> bool:
    """Fold `node` if every present input has a value; store the values. True if folded."""
    if all(graph.tensor(o).value is not None for o in node.outputs):
        return False
    if not op.folds_from_shapes and any(t is not None and graph.tensor(t).value is None for t in node.inputs):
        return False
    if max_elements is not None:
        for out in node.outputs:
            shape = graph.tensor(out).shape or ()
            count = 1
            for d in shape:
                count = count * d if isinstance(d, int) else -1
            if isinstance(count, SymDim) or count < 0 or count > max_elements:
                return False
    ctx = FoldCtx(graph, node, env)
    try:
        values = op.fold(ctx)
    except OnyxiaError:
        raise
    except Exception as exc:  # an operator bug must still name the node
        raise ShapeInferenceError(f"folding failed: {type(exc).__name__}: {exc}",
                                  node=node.name, op_type=node.op_type) from exc
    if not values:
        return False
    folded = False
    for out, value in zip(node.outputs, values):
        if value is None:
            continue
        t = graph.tensor(out)
        value = _normalize(value, t)
        if t.shape is not None and all(isinstance(d, int) for d in t.shape) and tuple(value.shape) != t.shape:
            raise ShapeInferenceError(f"folded output '{out}' has shape {value.shape}, inferred {t.shape}",
                                      node=node.name, op_type=node.op_type)
        t.value = value
        folded = True
    return folded


def _normalize(value: object, t) -> np.ndarray:
    """Fold results as arrays: scalars wrapped, object arrays without symbols made numeric."""
    if not isinstance(value, np.ndarray):
        value = np.asarray(value, dtype=object if isinstance(value, SymDim) else t.dtype.numpy)
    if value.dtype == object and not any(isinstance(v, SymDim) for v in value.reshape(-1)):
        value = value.astype(t.dtype.numpy)
    return value


def _check_dims(ctx: InferenceCtx, env: DimEnv, out: str, shape: tuple) -> None:
    """A negative output dim (Pad by -5 on a dim of 3, Split sizes < 0) is the model's error:
    report it here, naming the node, rather than let it reach a kernel as a huge u32."""
    for axis, d in enumerate(shape):
        if isinstance(d, SymDim) and env.placeholders & d.symbols:
            continue  # stand-in values say nothing about the real dims
        value = env.value(d)
        if value is not None and value < 0:
            given = "" if isinstance(d, int) else f" (= {d} at the dims given)"
            raise ctx.fail(f"output '{out}' would have dimension {value}{given} on axis {axis}; "
                           "dimensions cannot be negative")


class ShapeInferencePass(Pass):
    """1. Fails at once, listing every unsupported operator with its nodes.
    2. Calls each operator's `infer` in topological order and records dtype and shape.
    3. Folds small values on the way so shape-computing chains resolve.
    """

    name = "shape-inference"
    stage = Stage.INFERENCE

    def run(self, graph: IrGraph, compile_ctx: CompileContext) -> bool:
        check_supported(graph, compile_ctx.registry)
        for nid in graph.topological_order():
            infer_node(graph, compile_ctx, graph.node(nid))
        return True


def infer_node(graph: IrGraph, compile_ctx: CompileContext, node: Node) -> None:
    """Record the dtype and shape of `node`'s outputs (its inputs' must be known); fold small values."""
    op = resolve_operator(graph, compile_ctx.registry, node)
    assert op is not None, "check_supported ran first"
    ctx = InferenceCtx(graph, node, compile_ctx, compile_ctx.subgraphs)
    try:
        results = op.infer(ctx)
    except OnyxiaError:
        raise
    except Exception as exc:
        raise ctx.fail(f"inference failed: {type(exc).__name__}: {exc}") from exc
    if len(results) < len(node.outputs):
        raise ctx.fail(f"inferred {len(results)} outputs, the node has {len(node.outputs)}")
    for out, (dtype, shape) in zip(node.outputs, results):
        _check_dims(ctx, compile_ctx, out, tuple(shape))
        t = graph.tensor(out)
        t.dtype, t.shape = dtype, tuple(shape)
    fold_node(graph, compile_ctx, op, node, PROPAGATE_MAX_ELEMENTS)
