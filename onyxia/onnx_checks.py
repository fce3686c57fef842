"""Structural checks of an ONNX ModelProto at load, before onyxia builds anything from it.

onnxruntime refuses invalid models; onyxia must too, or it computes something from a model that
means nothing. Two layers, each error a ModelLoadError naming the element at fault:

1. Our own checks, for what needs a good message or what the onnx checker leaves out:
   versions (ir_version and opsets newer than the installed onnx knows, opset 0), single
   assignment of names (duplicate graph inputs and initializers, a node writing an initializer,
   an input or another node's output), negative initializer dims, negative Conv/pool pads, and
   the attribute types of the contrib ops onyxia implements; in subgraphs (If branches, Loop and
   Scan bodies) as in the main graph.
2. The onnx checker's per-node check (`onnx.checker.check_node`: input/output counts, unknown
   and mistyped attributes) for every node the installed onnx has a schema for at the model's
   opset and does not mark deprecated. Contrib ops (com.microsoft, and onnxruntime's own
   default-domain ops such as SimplifiedLayerNormalization) have none and are left to the
   operator registry.

The whole-model `onnx.checker.check_model` is not used: it requires topologically sorted nodes
(onnxruntime sorts them itself, and so does onyxia) and refuses models over 2 GiB in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import AttributeProto, TensorProto

from onyxia.errors import ModelLoadError

# Default-domain ops whose spatial attributes must be non-negative (pads) or positive (the rest);
# onnxruntime refuses them otherwise and the kernels would index out of their windows.
_SPATIAL_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                          "AveragePool", "LpPool", "MaxUnpool", "DeformConv"})
_NON_NEGATIVE_ATTRS = ("pads", "output_padding")
_POSITIVE_ATTRS = ("kernel_shape", "strides", "dilations")

# Attribute types of the onnxruntime contrib ops onyxia implements (onnxruntime's
# ContribOperators.md); onnx has no schema for them, so without this a float num_heads or a
# string epsilon would reach the operator. Attributes not listed are left alone.
_I, _F = AttributeProto.INT, AttributeProto.FLOAT
_LAYER_NORM_ATTRS = {"axis": _I, "epsilon": _F, "stash_type": _I}
_CONTRIB_ATTRIBUTES: dict[tuple[str, str], dict[str, int]] = {
    ("com.microsoft", "GroupQueryAttention"): {
        "num_heads": _I, "kv_num_heads": _I, "scale": _F, "softcap": _F, "local_window_size": _I,
        "do_rotary": _I, "rotary_interleaved": _I, "smooth_softmax": _I, "qk_output": _I},
    ("com.microsoft", "RotaryEmbedding"): {
        "interleaved": _I, "is_packed_batching": _I, "num_heads": _I, "rotary_embedding_dim": _I, "scale": _F},
    ("com.microsoft", "MatMulNBits"): {"K": _I, "N": _I, "bits": _I, "block_size": _I, "accuracy_level": _I},
    ("com.microsoft", "GatherBlockQuantized"): {"bits": _I, "block_size": _I, "gather_axis": _I,
                                                "quantize_axis": _I},
    ("com.microsoft", "SkipLayerNormalization"): {"epsilon": _F},
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): {"epsilon": _F},
    ("com.microsoft", "SimplifiedLayerNormalization"): _LAYER_NORM_ATTRS,
    ("", "SimplifiedLayerNormalization"): _LAYER_NORM_ATTRS,  # onnxruntime's, in the default domain
}


def node_label(node: onnx.NodeProto, index: int) -> str:
    """The name onyxia gives a node: its own, else `OpType_index` (unnamed nodes are common)."""
    return node.name or f"{node.op_type}_{index}"


def domain_of(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def check_model_proto(proto: onnx.ModelProto) -> None:
    """Raise ModelLoadError for the first structural problem in `proto` (see the module doc)."""
    opsets = _check_versions(proto)
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = proto.ir_version
    ctx.opset_imports = opsets
    _check_graph(proto.graph, ctx, opsets, "")


def _check_graph(graph: onnx.GraphProto, ctx, opsets: dict[str, int], prefix: str) -> None:
    """The checks of one graph, then of its subgraphs (If branches, Loop and Scan bodies): their
    nodes are labelled `<node>/<attribute>/<node>`, as the loader names them."""
    _check_names(graph, prefix)
    for tensor in graph.initializer:
        _check_tensor(tensor, f"initializer '{tensor.name}'" + (f" of subgraph '{prefix[:-1]}'" if prefix else ""))
    for index, node in enumerate(graph.node):
        if not node.op_type.strip():
            raise ModelLoadError(f"node {index} ('{node.name}') {_where(prefix)}has no op_type")
        name = f"{prefix}{node_label(node, index)}"
        label = f"node '{name}' ({node.op_type})"
        _check_spatial_attributes(node, label)
        _check_contrib_attributes(node, label)
        subgraphs = [(a.name, g) for a in node.attribute for g in ([a.g] if a.HasField("g") else [])]
        subgraphs += [(f"{a.name}{i}", g) for a in node.attribute for i, g in enumerate(a.graphs)]
        for attr, sub in subgraphs:
            _check_graph(sub, ctx, opsets, f"{name}/{attr}/")
        # A node holding subgraphs is left to the loader and its operator: the per-node check
        # would check the subgraph too, without the outer names it may read.
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            continue
        if not _has_schema(node, opsets):
            continue
        if node.domain == "ai.onnx":  # the checker knows the default domain only as ""
            node = _with_domain(node, "")
        try:
            onnx.checker.check_node(node, ctx)
        except onnx.checker.ValidationError as exc:
            raise ModelLoadError(f"{label}: {_first_line(exc)}") from None


def _where(prefix: str) -> str:
    return f"in subgraph '{prefix[:-1]}' " if prefix else ""


def _with_domain(node: onnx.NodeProto, domain: str) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.domain = domain
    return copy


def _has_schema(node: onnx.NodeProto, opsets: dict[str, int]) -> bool:
    """Whether the installed onnx defines this op at the model's opset. onnxruntime adds ops of
    its own, some in the default domain (SimplifiedLayerNormalization, LayerNormalization before
    opset 17): those are the operator registry's to accept or report as unsupported."""
    domain = domain_of(node.domain)
    if domain not in opsets:
        return True  # let the checker report the missing opset import
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets[domain], domain)
    except onnx.defs.SchemaError:
        return False
    # The checker refuses deprecated versions (GroupNormalization-18); onnxruntime runs them.
    return not schema.deprecated


def _check_versions(proto: onnx.ModelProto) -> dict[str, int]:
    if proto.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(f"the model's ir_version {proto.ir_version} is newer than the installed "
                             f"onnx {onnx.__version__} knows (up to {onnx.IR_VERSION}); upgrade onnx")
    if proto.ir_version < 3:  # opset imports exist from IR version 3 (ONNX 1.0) on
        raise ModelLoadError(f"the model's ir_version {proto.ir_version} is not a valid ONNX IR "
                             "version (3 or later)")
    known = onnx.defs.C.schema_version_map()  # {domain: (first, last)} this onnx has schemas for
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = domain_of(entry.domain)
        shown = entry.domain or "ai.onnx"
        if domain in opsets:
            raise ModelLoadError(f"opset_import lists domain '{shown}' twice")
        if entry.version < 1:
            raise ModelLoadError(f"opset_import: domain '{shown}' has version {entry.version}; "
                                 "opset versions start at 1")
        last = known.get(domain, (0, None))[1]
        if last is not None and entry.version > last:
            raise ModelLoadError(f"opset_import: domain '{shown}' version {entry.version} is newer than "
                                 f"the installed onnx {onnx.__version__} knows (up to {last}); upgrade onnx")
        opsets[domain] = entry.version
    return opsets


def _check_names(graph: onnx.GraphProto, prefix: str = "") -> None:
    """Every tensor name is assigned once in its graph: by a graph input, an initializer or one
    node output. An input may repeat an initializer's name (that gives the input a default
    value). A subgraph may reuse an outer name (the loader renames it); within itself, the same
    rule holds for what it assigns."""
    graph_kind = f"subgraph '{prefix[:-1]}'" if prefix else "graph"
    owner: dict[str, str] = {}
    for vi in graph.input:
        if vi.name in owner:
            raise ModelLoadError(f"{graph_kind} input '{vi.name}' is declared twice")
        owner[vi.name] = f"{graph_kind} input '{vi.name}'"
    initializers: set[str] = set()
    for tensor in graph.initializer:
        if tensor.name in initializers:
            raise ModelLoadError(f"initializer '{tensor.name}' {_where(prefix)}is declared twice")
        initializers.add(tensor.name)
        owner.setdefault(tensor.name, f"initializer '{tensor.name}'")
    for index, node in enumerate(graph.node):
        label = f"node '{prefix}{node_label(node, index)}' ({node.op_type})"
        for out in node.output:
            if not out:
                continue  # an absent optional output
            if out in initializers:
                raise ModelLoadError(f"{label} writes tensor '{out}', which is an initializer")
            if out in owner:
                raise ModelLoadError(f"tensor '{out}' is produced twice: by {owner[out]} and {label}")
            owner[out] = label
    if prefix:
        return  # a body may list one tensor as several outputs (a carried value and a scan output)
    outputs: set[str] = set()
    for vi in graph.output:
        if vi.name in outputs:
            raise ModelLoadError(f"{graph_kind} output '{vi.name}' is declared twice")
        outputs.add(vi.name)


def _check_tensor(tensor: TensorProto, what: str) -> None:
    negative = [d for d in tensor.dims if d < 0]
    if negative:
        raise ModelLoadError(f"{what} has a negative dimension in dims {list(tensor.dims)}")
    if tensor.data_location == TensorProto.EXTERNAL:
        return  # checked against its folder by the loader (onyxia.onnx), before it is read
    if tensor.HasField("raw_data"):
        # The checker copies the tensor into C++ (1.2 s per 200 MB measured) to check little
        # more than the decoding in the loader does: a wrong size fails there, named.
        return
    try:
        onnx.checker.check_tensor(tensor, onnx.checker.DEFAULT_CONTEXT)
    except onnx.checker.ValidationError as exc:
        raise ModelLoadError(f"{what}: {_first_line(exc)}") from None


def _check_spatial_attributes(node: onnx.NodeProto, label: str) -> None:
    if domain_of(node.domain) != "" or node.op_type not in _SPATIAL_OPS:
        return
    for attr in node.attribute:
        if attr.type != AttributeProto.INTS:
            continue  # a mistyped attribute is the schema check's to report
        values = list(attr.ints)
        if attr.name in _NON_NEGATIVE_ATTRS and any(v < 0 for v in values):
            raise ModelLoadError(f"{label}: attribute '{attr.name}' must be non-negative, got {values}")
        if attr.name in _POSITIVE_ATTRS and any(v < 1 for v in values):
            raise ModelLoadError(f"{label}: attribute '{attr.name}' must be positive, got {values}")


def _check_contrib_attributes(node: onnx.NodeProto, label: str) -> None:
    expected = _CONTRIB_ATTRIBUTES.get((domain_of(node.domain), node.op_type))
    if not expected:
        return
    for attr in node.attribute:
        want = expected.get(attr.name)
        if want is not None and attr.type != want:
            raise ModelLoadError(f"{label}: attribute '{attr.name}' must be "
                                 f"{AttributeProto.AttributeType.Name(want)}, got "
                                 f"{AttributeProto.AttributeType.Name(attr.type)}")


def all_tensors(graph: onnx.GraphProto) -> Iterator[tuple[TensorProto, str]]:
    """Every TensorProto a graph holds, with a description: initializers, Constant values and
    other tensor attributes, subgraphs included (where external data may point)."""
    for tensor in graph.initializer:
        yield tensor, f"initializer '{tensor.name}'"
    for sparse in graph.sparse_initializer:
        yield sparse.values, f"sparse initializer '{sparse.values.name}' values"
        yield sparse.indices, f"sparse initializer '{sparse.values.name}' indices"
    for index, node in enumerate(graph.node):
        for attr in node.attribute:
            where = f"node '{node_label(node, index)}' attribute '{attr.name}'"
            if attr.HasField("t"):
                yield attr.t, where
            for tensor in attr.tensors:
                yield tensor, where
            if attr.HasField("g"):
                yield from all_tensors(attr.g)
            for sub in attr.graphs:
                yield from all_tensors(sub)


def _first_line(exc: Exception) -> str:
    """The checker's message without its trailing '==> Context' block (we name the node)."""
    return str(exc).split("\n\n==> Context")[0].strip()
