"""FunctionExpansionPass: ops that run as a body of other ops (their ONNX function body, or an
exact decomposition onyxia writes) are replaced by it before shape inference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx.checker
import onnx.inliner
import onnx.shape_inference
from onnx import numpy_helper

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.compiler.passes.inference import infer_node
from onyxia.errors import ShapeInferenceError, UnsupportedOperatorError, ValueRequiredError
from onyxia.ir import dtypes
from onyxia.ir.graph import OPSETS_META, IrGraph, Node, TensorDef, TensorKind
from onyxia.ir.provenance import value_sources
from onyxia.onnx import node_attributes
from onyxia.operators.base import InferenceCtx
from onyxia.operators.functions import Call, FunctionOp
from onyxia.operators.registry import check_supported, resolve_operator


class FunctionExpansionPass(Pass):
    """Inference stage, before shape inference. For every node whose operator runs as a function
    (`Operator.runs_as_function`: a FunctionOp, operators/functions.py, or an op whose kernel
    lacks the attribute values of this node, such as LayerNormalization's stash_type):

    1. infers the dtypes and shapes of what the node reads (its ancestors, in topological order:
       context-dependent bodies such as NegativeLogLikelihoodLoss's depend on the input types);
    2. gets the body: the op's own decomposition (nodes written against a fixed opset, which
       the spliced nodes keep in their meta), or else onnx's: a one-node model with those input
       types goes through `onnx.inliner.inline_selected_functions` with the op's schema
       function, which also substitutes attributes and inlines graph attributes
       (FlexAttention's score_mod);
    3. splices the body in place of the node: its nodes are named `<node>/<body node>` and its
       internal tensors `<node>/<tensor>`, so errors still name the node the model had; domains
       the body imports and the graph does not join the graph's opsets;
    4. handles the body's own nodes in order: a FunctionOp is expanded in turn
       (SoftmaxCrossEntropyLoss calls NegativeLogLikelihoodLoss), any other is inferred, and an op
       the registry lacks fails at once, listing the body nodes that need it.
    A graph without such nodes is left alone at the cost of one scan.
    """

    name = "function-expansion"
    stage = Stage.INFERENCE

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        # Subgraphs (If arms, Loop and Scan bodies) are inferred later, by their node's
        # inference: their function ops are expanded then (compiler/subgraphs.py runs this pass).
        order = graph.topological_order()
        targets = [nid for nid in order if self._is_function(graph, ctx, graph.node(nid))]
        if not targets:
            return False
        check_supported(graph, ctx.registry)
        needed: set[int] = set()
        for nid in targets:
            needed |= graph.ancestors(nid)
        for nid in order:
            if nid in targets:
                self._expand(graph, ctx, graph.node(nid))
            elif nid in needed:
                infer_node(graph, ctx, graph.node(nid))
        return True

    @staticmethod
    def _is_function(graph: IrGraph, ctx: CompileContext, node: Node) -> bool:
        op = resolve_operator(graph, ctx.registry, node)
        return op is not None and op.runs_as_function(node)

    def _expand(self, graph: IrGraph, ctx: CompileContext, node: Node) -> None:
        op = resolve_operator(graph, ctx.registry, node)
        if isinstance(op, FunctionOp) and op.decompose is not None:
            try:
                own = op.decompose(self._call(graph, node, ctx))
            except ValueRequiredError as exc:
                if not exc.symbols:  # a literal the dims cannot give says which symbols it needs
                    exc.sources, exc.symbols = value_sources(graph, exc.tensor)
                raise
            body = onnx.helper.make_model(onnx.helper.make_graph(list(own.nodes), "decomposition", [], []),
                                          opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in own.opsets.items()])
            opsets = dict(own.opsets)
        else:
            body, opsets = self._body(graph, ctx, node), {}
        graph.remove_node(node.id)
        rename: dict[str, str] = {}
        outer = {t for t in (*node.inputs, *node.outputs) if t}

        def name_of(t: str) -> str | None:
            if not t:
                return None
            if t in outer:
                return t
            if t not in rename:
                rename[t] = graph.fresh_name(f"{node.name}/{t}")
            return rename[t]

        for init in body.graph.initializer:  # constants an inlined subgraph may carry
            value = numpy_helper.to_array(init)
            graph.add_tensor(TensorDef(name_of(init.name), dtypes.from_numpy(value.dtype), tuple(value.shape),
                                       TensorKind.WEIGHT, value))
        added: list[int] = []
        for i, proto in enumerate(body.graph.node):
            label = f"{node.name}/{proto.name or f'{proto.op_type}_{i}'}"
            outputs = [name_of(t) or graph.fresh_name(f"{label}/absent_output_{k}") for k, t in enumerate(proto.output)]
            added.append(graph.add_node(proto.op_type, [name_of(t) for t in proto.input], outputs,
                                        node_attributes(proto, label, graph, rename),
                                        domain=_domain(proto.domain), name=label))
            if opsets:  # a decomposition's nodes keep the opset they were written for
                graph.node(added[-1]).meta[OPSETS_META] = opsets
        for opset in body.opset_import:
            graph.opsets.setdefault(_domain(opset.domain), int(opset.version))
        missing: dict[tuple[str, str], list[str]] = {}
        for nid in added:
            sub = graph.node(nid)
            if resolve_operator(graph, ctx.registry, sub) is None:
                missing.setdefault((sub.domain, sub.op_type), []).append(sub.name)
        if missing:
            raise UnsupportedOperatorError(missing)
        for nid in added:
            sub = graph.node(nid)
            if self._is_function(graph, ctx, sub):
                self._expand(graph, ctx, sub)
            else:
                infer_node(graph, ctx, sub)

    @staticmethod
    def _call(graph: IrGraph, node: Node, ctx: CompileContext) -> Call:
        tensors = [graph.tensor(t) if t else None for t in node.inputs]
        for i, t in enumerate(tensors):
            if t is not None and (t.dtype is None or t.shape is None):
                raise ShapeInferenceError(f"type of input {i} ('{t.name}') is not known", node=node.name,
                                          op_type=node.op_type)
        return Call(node, tuple(t.dtype if t else None for t in tensors),
                    tuple(t.shape if t else None for t in tensors), tuple(t.value if t else None for t in tensors),
                    InferenceCtx(graph, node, ctx, ctx.subgraphs))

    @staticmethod
    def _body(graph: IrGraph, ctx: CompileContext, node: Node) -> onnx.ModelProto:
        """A model holding `node`'s function body, as onnx's inliner builds it."""
        def fail(message: str) -> ShapeInferenceError:
            return ShapeInferenceError(message, node=node.name, op_type=node.op_type)

        inputs, seen = [], set()
        for i, t in enumerate(node.inputs):
            if t is None or t in seen:
                continue
            seen.add(t)
            tensor = graph.tensor(t)
            if tensor.dtype is None or tensor.shape is None:
                raise fail(f"type of input {i} ('{t}') is not known")
            inputs.append(onnx.helper.make_tensor_value_info(t, tensor.dtype.onnx, [str(d) if not isinstance(d, int)
                                                                                    else d for d in tensor.shape]))
        version = graph.opset_of(node)
        try:
            schema = onnx.defs.get_schema(node.op_type, version, node.domain)
            attrs = [_attribute_proto(k, v, schema) for k, v in node.attributes.items()]
            # A body refers to attributes the node may leave out; onnx leaves such references
            # unresolved, so the schema's defaults are spelled out.
            attrs += [spec.default_value for name, spec in schema.attributes.items()
                      if name not in node.attributes and spec.default_value.name]
        except Exception as exc:
            raise fail(f"cannot describe the node to onnx: {exc}") from exc
        proto = onnx.helper.make_node(node.op_type, [t or "" for t in node.inputs], node.outputs, domain=node.domain,
                                      name=node.name)
        proto.attribute.extend(attrs)
        model = onnx.helper.make_model(
            onnx.helper.make_graph([proto], "expand", inputs,
                                   [onnx.helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None)
                                    for t in node.outputs]),
            opset_imports=[onnx.helper.make_opsetid(d, version if d == node.domain else v)
                           for d, v in sorted(graph.opsets.items())])
        try:  # what the node gives must fit the schema before onnx builds a body from it
            checker = onnx.checker.C.CheckerContext()
            checker.ir_version = model.ir_version
            checker.opset_imports = {o.domain: o.version for o in model.opset_import}
            onnx.checker.check_node(proto, checker)
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        except Exception as exc:
            raise fail(str(exc).strip()) from exc
        function = _schema_function(schema, version, proto, {vi.name: vi.type for vi in inputs})
        if function is None:
            raise fail(f"onnx {onnx.__version__} has no function body for {node.op_type} at opset {version}")
        model.functions.append(function)
        # The node's own body goes in as a local function: onnx's inliner builds a
        # context-dependent body from the types of the node's inputs by name and asserts on an
        # absent optional input ("") that precedes a present one (LinearAttention's past_state
        # before decay). FunctionOps the body calls are inlined by onnx at any depth (a Scan
        # body's included); those at the top are expanded by this pass anyway.
        ids = [(d, op) for d, op in ctx.registry if isinstance(ctx.registry.get(op, d), FunctionOp)]
        try:
            body = onnx.inliner.inline_local_functions(model)
            body = onnx.inliner.inline_selected_functions(body, ids, inline_schema_functions=True)
        except Exception as exc:
            raise fail(f"onnx could not build the function body: {exc}") from exc
        return body


def _schema_function(schema: onnx.defs.OpSchema, version: int, node: onnx.NodeProto,
                     types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    """The schema's function body for `node` at opset `version` (the newest body not newer), a
    context-dependent one built from the types of the node's inputs (an absent input: none)."""
    if schema.has_context_dependent_function:
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= version]
        if not versions:
            return None
        raw = schema.get_context_dependent_function_with_opset_version(
            max(versions), node.SerializeToString(),
            [(types[n] if n else onnx.TypeProto()).SerializeToString() for n in node.input])
    else:
        versions = [v for v in schema.function_opset_versions if v <= version]
        if not versions:
            return None
        raw = schema.get_function_with_opset_version(max(versions))
    function = onnx.FunctionProto()
    function.ParseFromString(raw)
    return function if function.node else None


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _attribute_proto(name: str, value: Any, schema: onnx.defs.OpSchema) -> onnx.AttributeProto:
    """An IR attribute value back as ONNX (the schema gives the type of an empty list)."""
    if isinstance(value, np.ndarray):
        return onnx.helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, IrGraph):  # a graph attribute (FlexAttention's score_mod): as it was loaded
        if not isinstance(value.source, onnx.GraphProto):
            raise ValueError(f"attribute '{name}' is a graph built in the IR, which onnx cannot read back")
        return onnx.helper.make_attribute(name, value.source)
    if isinstance(value, (list, tuple)) and not value:
        spec = schema.attributes.get(name)
        attr_type = onnx.AttributeProto.AttributeType(int(spec.type)) if spec is not None else None
        return onnx.helper.make_attribute(name, [], attr_type=attr_type)
    return onnx.helper.make_attribute(name, value)


__all__ = ["FunctionExpansionPass"]
