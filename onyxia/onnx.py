"""ONNX → IrGraph.

Reads a path, bytes or ModelProto (external data included), records the opset of each domain,
turns dim_param strings into symbols (dim_value into ints) and
initializers and Constant nodes into valued weight tensors. A dim the model leaves unnamed —
absent, an empty or "?" dim_param, or a negative dim_value (paddle2onnx and older converters write
-1 for "dynamic") — becomes a fresh symbol named after its input and axis (`x_dim0`), bound from the
feed by InferenceSession or given with `--dim x_dim0=N`. Problems in the file surface as
ModelLoadError naming the element at fault, never as a protobuf traceback.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onyxia.errors import ModelLoadError, OnyxiaError
from onyxia.ir import dtypes
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind
from onyxia.ir.shapes import Dim, SymDim
from onyxia.onnx_checks import all_tensors, check_model_proto, domain_of, node_label
from onyxia.paths import resolve_inside

ModelSource = str | os.PathLike | bytes | onnx.ModelProto
DEFAULT_OPSET = 21  # the default-domain opset assumed where a model imports none

# Sub-byte element types pack several values per byte; their bit widths (INT2/UINT2 exist in
# newer onnx versions only).
_PACKED_BITS = {getattr(TensorProto, name): bits for name, bits in
                (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
                if hasattr(TensorProto, name)}
_EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})


def read_model_proto(source: ModelSource, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """Parse and check a model and read its external data, without any IR conversion.

    The structural checks (onyxia.onnx_checks) run before any external data is read.
    External data files must lie inside the model's folder: the file's own folder for a path,
    `base_dir` for bytes or a ModelProto (without it, such a model is refused rather than read
    relative to the current directory). A ModelProto passed in is never modified.
    """
    what = f"'{source}'" if isinstance(source, (str, os.PathLike)) else (
        "the model bytes" if isinstance(source, (bytes, bytearray)) else "the ModelProto")
    if isinstance(source, onnx.ModelProto):
        proto = source
    else:
        try:
            if isinstance(source, (bytes, bytearray)):
                proto = onnx.load_model_from_string(bytes(source))
            else:
                path = Path(source)
                if not path.is_file():
                    raise ModelLoadError(f"model file '{path}' does not exist")
                proto = onnx.load(str(path), load_external_data=False)
                base_dir = path.parent if base_dir is None else base_dir
        except OnyxiaError:
            raise
        except Exception as exc:  # protobuf DecodeError, unreadable file, ...
            raise ModelLoadError(f"cannot read {what} as an ONNX model: {type(exc).__name__}: {exc}") from exc
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise ModelLoadError(f"{what} has no graph (an empty file, or not an ONNX model)")
    check_model_proto(proto)
    external = [(t, where) for t, where in all_tensors(proto.graph)
                if t.data_location == TensorProto.EXTERNAL]
    if not external:
        return proto
    if base_dir is None:
        raise ModelLoadError(
            f"{what}: {external[0][1]} keeps its data in an external file; pass base_dir= (the "
            "folder holding the model's files) to load a model with external data from bytes "
            "or a ModelProto")
    if proto is source:
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
        external = [(t, where) for t, where in all_tensors(proto.graph)
                    if t.data_location == TensorProto.EXTERNAL]
    for tensor, where in external:
        _read_external(tensor, Path(base_dir), f"{what}: {where}")
    return proto


def _read_external(tensor: onnx.TensorProto, folder: Path, what: str) -> None:
    """Read one tensor's external data into raw_data, after checking its location and bounds.

    Done here rather than by onnx so that the checks do not depend on the onnx version; exactly
    the tensor's declared size is read, so a huge or endless file cannot exhaust memory."""
    entries = {e.key: e.value for e in tensor.external_data}
    unknown = sorted(set(entries) - _EXTERNAL_KEYS)
    if unknown:
        raise ModelLoadError(f"{what}: unknown external data keys {unknown}")
    if tensor.data_type == TensorProto.STRING:
        raise ModelLoadError(f"{what}: string tensors cannot use external data")
    try:
        offset = int(entries.get("offset") or 0)
        length = int(entries["length"]) if entries.get("length") else None
    except ValueError:
        raise ModelLoadError(f"{what}: external data offset/length must be integers, got "
                             f"{entries.get('offset')!r}/{entries.get('length')!r}") from None
    path = resolve_inside(folder, entries.get("location"), f"{what} external data", ModelLoadError)
    numel = int(np.prod(tensor.dims, dtype=object)) if tensor.dims else 1
    bits = _PACKED_BITS.get(tensor.data_type)
    try:
        expected = -(-numel * bits // 8) if bits else numel * np.dtype(
            onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        raise ModelLoadError(f"{what}: unknown element type {tensor.data_type}") from None
    if offset < 0 or (length is not None and length != expected):
        raise ModelLoadError(f"{what}: external data offset {offset} / length {length} do not fit "
                             f"the tensor's {expected} bytes (dims {list(tensor.dims)})")
    if not path.is_file():
        raise ModelLoadError(f"{what}: external data file '{entries['location']}' does not exist "
                             f"in {folder} (or is not a regular file)")
    size = path.stat().st_size
    if offset + expected > size:
        raise ModelLoadError(f"{what}: needs bytes {offset}..{offset + expected} of '{entries['location']}', "
                             f"which has {size}")
    with open(path, "rb") as fh:
        fh.seek(offset)
        tensor.raw_data = fh.read(expected)
    tensor.data_location = TensorProto.DEFAULT
    del tensor.external_data[:]


def load_model(source: ModelSource, base_dir: str | os.PathLike | None = None) -> IrGraph:
    """Load an ONNX model into an IrGraph.

    `base_dir`: the folder of the model's external data files, for a model given as bytes or
    a ModelProto (a path's own folder is used otherwise). The model is checked structurally
    first (onyxia.onnx_checks); every problem is a ModelLoadError naming the element.
    """
    proto = read_model_proto(source, base_dir)
    opsets = {domain_of(o.domain): int(o.version) for o in proto.opset_import}
    # A model without a default-domain import has no default-domain nodes (the checker saw to
    # that); the entry only gives passes that add such nodes an opset to resolve them with.
    opsets.setdefault("", DEFAULT_OPSET)
    graph = IrGraph(proto.graph.name or "graph", opsets)
    graph.metadata = {p.key: p.value for p in proto.metadata_props}
    graph.metadata["producer"] = f"{proto.producer_name} {proto.producer_version}".strip()

    for init in proto.graph.initializer:
        graph.add_tensor(TensorDef(init.name, _dtype(init.data_type, f"initializer '{init.name}'"),
                                   tuple(int(d) for d in init.dims), TensorKind.WEIGHT,
                                   _to_array(init, f"initializer '{init.name}'")))
    taken = _dim_param_names(proto.graph.input)
    for vi in proto.graph.input:
        if vi.name in graph.tensors:  # an input with a default value (initializer): a weight
            continue
        container = _container(vi, f"input '{vi.name}'")
        if container is not None:  # a sequence or optional: its elements come with the feed
            graph.add_tensor(TensorDef(vi.name, container[1], None, TensorKind.INPUT, container=container[0]))
        else:
            dtype, shape = _value_info(vi, f"input '{vi.name}'", taken)
            graph.add_tensor(TensorDef(vi.name, dtype, shape, TensorKind.INPUT))
        graph.inputs.append(vi.name)

    names = _Names.of(proto.graph)
    for index, np_node in enumerate(proto.graph.node):
        name = node_label(np_node, index)
        attrs = _node_attributes(np_node, name, graph, names, {})
        if np_node.op_type == "Constant" and domain_of(np_node.domain) == "":
            _add_constant(graph, name, np_node, attrs)
            continue
        inputs = [t if t else None for t in np_node.input]
        graph.add_node(np_node.op_type, inputs, _outputs(graph, name, np_node), attrs,
                       domain=domain_of(np_node.domain), name=name)

    for vi in proto.graph.output:
        graph.outputs.append(vi.name)
        t = graph.tensors.get(vi.name)
        if t is not None and t.kind is TensorKind.INTERMEDIATE:
            t.kind = TensorKind.OUTPUT
        if t is not None and t.container is None:
            t.container = (_container(vi, f"output '{vi.name}'") or (None,))[0]
    if not graph.outputs:
        raise ModelLoadError("the model declares no graph outputs")
    graph.validate()
    return graph


def _outputs(graph: IrGraph, node_name: str, node: onnx.NodeProto) -> list[str]:
    """Output names, with a private name for each absent optional output (""), so that two
    nodes with absent outputs (every layer's SkipSimplifiedLayerNormalization) do not both
    "produce" tensor ''. Positions are kept: Split (before opset 18) counts its outputs."""
    return [n or graph.fresh_name(f"{node_name}/absent_output_{i}") for i, n in enumerate(node.output)]


def _dtype(elem_type: int, what: str) -> dtypes.DType:
    try:
        return dtypes.from_onnx(elem_type)
    except OnyxiaError as exc:
        raise ModelLoadError(f"{what}: {exc}") from None


def _to_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    if tensor.data_location == TensorProto.EXTERNAL:  # numpy_helper would read the cwd
        raise ModelLoadError(f"{what}: external data was not loaded")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:
        raise ModelLoadError(f"{what}: cannot decode tensor data ({exc})") from exc


# dim_params that mean "unknown" rather than naming a dim: paddle2onnx writes "?" on every
# unknown axis (x: [-1, 3, "?", "?"]), so treating it as one shared name would force h == w.
_ANONYMOUS_DIM_PARAMS = frozenset({"", "?"})


def _dim_param_names(inputs) -> set[str]:
    """Every dim_param text the inputs use, so fresh names cannot collide with one."""
    return {d.dim_param.strip() for vi in inputs if vi.type.HasField("tensor_type")
            for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}


def _value_info(vi: onnx.ValueInfoProto, what: str,
                taken: set[str]) -> tuple[dtypes.DType, tuple[Dim, ...]]:
    if not vi.type.HasField("tensor_type"):
        raise ModelLoadError(f"{what} is not a tensor (sequence/map/optional types are not supported)")
    tt = vi.type.tensor_type
    dtype = _dtype(tt.elem_type, what)
    if not tt.HasField("shape"):
        raise ModelLoadError(f"{what} has no shape; give it a rank in the model")
    return dtype, _shape(vi, what, taken)


def _shape(vi: onnx.ValueInfoProto, what: str, taken: set[str] | None = None) -> tuple[Dim, ...]:
    """Dims of a declared shape; `taken`: dim names already used, so fresh ones avoid them."""
    taken = set() if taken is None else taken
    tt = vi.type.tensor_type
    shape: list[Dim] = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param.strip() not in _ANONYMOUS_DIM_PARAMS:
            try:
                shape.append(parse_dim(d.dim_param))
            except OnyxiaError as exc:
                raise ModelLoadError(f"{what} dim {i}: {exc}") from None
        else:  # dynamic but unnamed: make a name the user can bind with --dim
            shape.append(SymDim.symbol(_fresh_dim_name(vi.name, i, taken)))
    return tuple(shape)


def _fresh_dim_name(tensor: str, axis: int, taken: set[str]) -> str:
    """`<input>_dim<axis>`, made an identifier (so it reads back from a plan inside an expression
    and is typed as-is after --dim) and unique among the model's dim names."""
    base = re.sub(r"\W", "_", tensor)
    base = base if re.match(r"[A-Za-z_]", base) else f"input_{base}"
    name, n = f"{base}_dim{axis}", 1
    while name in taken:
        name, n = f"{base}_dim{axis}_{n}", n + 1
    taken.add(name)
    return name


def _attribute(attr: onnx.AttributeProto, node_name: str) -> Any:
    try:
        value = onnx.helper.get_attribute_value(attr)
    except Exception as exc:
        raise ModelLoadError(f"node '{node_name}' attribute '{attr.name}': {exc}") from exc
    if isinstance(value, onnx.GraphProto) or (isinstance(value, list) and value and
                                              isinstance(value[0], onnx.GraphProto)):
        raise ModelLoadError(f"node '{node_name}' attribute '{attr.name}': a graph outside a node's attributes")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return _to_array(value, f"node '{node_name}' attribute '{attr.name}'")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    return value


def _add_constant(graph: IrGraph, name: str, node: onnx.NodeProto, attrs: dict[str, Any],
                  out: str | None = None) -> None:
    """Constant nodes become valued weight tensors: nothing to run, only data."""
    if len(node.output) != 1 or len(attrs) != 1:
        raise ModelLoadError(f"Constant node '{name}' needs exactly one output and one value attribute")
    key, value = next(iter(attrs.items()))
    if key == "value":
        array = value
    elif key in ("value_float", "value_int"):
        array = np.array(value, dtype=np.float32 if key == "value_float" else np.int64)
    elif key in ("value_floats", "value_ints"):
        array = np.array(value, dtype=np.float32 if key == "value_floats" else np.int64)
    elif key == "sparse_value":
        raise ModelLoadError(f"Constant node '{name}': sparse_value is not supported")
    else:
        raise ModelLoadError(f"Constant node '{name}': attribute '{key}' is not supported")
    array = np.asarray(array)
    out = out or node.output[0]
    if out in graph.tensors:
        raise ModelLoadError(f"tensor '{out}' is produced twice (Constant node '{name}')")
    graph.add_tensor(TensorDef(out, dtypes.from_numpy(array.dtype), tuple(array.shape), TensorKind.WEIGHT, array))


def node_attributes(node: onnx.NodeProto, node_name: str, graph: IrGraph | None = None,
                    scope: dict[str, str] | None = None) -> dict[str, Any]:
    """A NodeProto's attributes as the IR keeps them (strings decoded, tensors as arrays, graphs
    as subgraphs of `graph` reading its tensors, `scope` mapping renamed ones); for passes that
    splice ONNX nodes into a graph (FunctionExpansionPass)."""
    if graph is None:
        return {a.name: _attribute(a, node_name) for a in node.attribute}
    names = _Names({*graph.tensors, *(t for g in graph.all_subgraphs() for t in g.tensors)},
                   {n.name for n in graph.nodes})
    return _node_attributes(node, node_name, graph, names, dict(scope or {}))


# ---- subgraphs (If branches, Loop and Scan bodies) ---------------------------------------------

class _Names:
    """Every tensor and node name the IR uses so far. A subgraph's own tensors keep their names
    unless one is taken elsewhere in the model (ONNX scopes names per graph; the IR, whose plan
    has one tensor table, needs them unique): then they get a fresh one."""

    def __init__(self, tensors: set[str], nodes: set[str]):
        self.tensors, self.nodes = tensors, nodes

    @staticmethod
    def of(graph: onnx.GraphProto) -> _Names:
        tensors = {t.name for t in graph.initializer} | {v.name for v in (*graph.input, *graph.output)}
        tensors |= {t for node in graph.node for t in (*node.input, *node.output) if t}
        nodes = {node.name or f"{node.op_type}_{i}" for i, node in enumerate(graph.node)}
        return _Names(tensors, nodes)

    @staticmethod
    def _fresh(name: str, taken: set[str]) -> str:
        new, n = name, 1
        while new in taken:
            n += 1
            new = f"{name}~{n}"
        taken.add(new)
        return new

    def tensor(self, name: str) -> str:
        return self._fresh(name, self.tensors)

    def node(self, name: str) -> str:
        return self._fresh(name, self.nodes)


def _node_attributes(node: onnx.NodeProto, name: str, graph: IrGraph, names: _Names,
                     scope: dict[str, str]) -> dict[str, Any]:
    """A node's attributes as the IR keeps them; graph attributes become subgraphs of `graph`."""
    attrs: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            attrs[a.name] = _subgraph(a.g, graph, names, scope, f"{name}/{a.name}")
        elif a.type == onnx.AttributeProto.GRAPHS:
            attrs[a.name] = [_subgraph(g, graph, names, scope, f"{name}/{a.name}{i}") for i, g in enumerate(a.graphs)]
        else:
            attrs[a.name] = _attribute(a, name)
    return attrs


def _subgraph(proto: onnx.GraphProto, parent: IrGraph, names: _Names, outer: dict[str, str], label: str) -> IrGraph:
    """A GraphProto attribute as an IrGraph whose parent is `parent`: it reads the enclosing
    graphs' tensors by name (`outer` maps the ONNX names of those renamed to their IR names)."""
    sub = IrGraph(label, parent.opsets, parent=parent)
    sub.source = proto
    scope = dict(outer)

    def define(t: str) -> str:
        scope[t] = names.tensor(t)
        return scope[t]

    for init in proto.initializer:
        what = f"{label} initializer '{init.name}'"
        sub.add_tensor(TensorDef(define(init.name), _dtype(init.data_type, what), tuple(int(d) for d in init.dims),
                                 TensorKind.WEIGHT, _to_array(init, what)))
    for vi in proto.input:  # formal parameters: the op (If, Loop, Scan) gives their types
        dtype, shape = _formal_type(vi, f"{label} input '{vi.name}'")
        container = _container(vi, f"{label} input '{vi.name}'")
        sub.add_tensor(TensorDef(define(vi.name), dtype, shape, TensorKind.INPUT,
                                 container=container[0] if container else None))
        sub.inputs.append(scope[vi.name])
    for index, np_node in enumerate(proto.node):
        name = names.node(f"{label}/{np_node.name or f'{np_node.op_type}_{index}'}")
        attrs = _node_attributes(np_node, name, sub, names, scope)
        if np_node.op_type == "Constant" and domain_of(np_node.domain) == "":
            _add_constant(sub, name, np_node, attrs, define(np_node.output[0]) if np_node.output else None)
            continue
        inputs = [scope.get(t, t) if t else None for t in np_node.input]
        outputs = [define(t) if t else sub.fresh_name(f"{name}/absent_output_{i}")
                   for i, t in enumerate(np_node.output)]
        sub.add_node(np_node.op_type, inputs, outputs, attrs, domain=domain_of(np_node.domain), name=name)
    sub.outputs = [scope.get(vi.name, vi.name) for vi in proto.output]
    return sub


def _container(vi: onnx.ValueInfoProto, what: str) -> tuple[str, dtypes.DType | None] | None:
    """("sequence" | "optional", element dtype if declared) for a non-tensor value, else None."""
    kind = vi.type.WhichOneof("value")
    if kind not in ("sequence_type", "optional_type"):
        if kind not in (None, "tensor_type"):
            raise ModelLoadError(f"{what} is a {kind.replace('_type', '')}; onyxia takes tensors, sequences and "
                                 "optionals")
        return None
    inner = getattr(vi.type, kind).elem_type
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        inner = getattr(inner, inner.WhichOneof("value")).elem_type
    elem = inner.tensor_type.elem_type if inner.WhichOneof("value") == "tensor_type" else 0
    return kind.removesuffix("_type"), (_dtype(elem, what) if elem else None)


def _formal_type(vi: onnx.ValueInfoProto, what: str) -> tuple[dtypes.DType | None, tuple[Dim, ...] | None]:
    """A subgraph input's declared type; either part may be missing (the op infers it)."""
    if not vi.type.HasField("tensor_type"):
        return None, None
    tt = vi.type.tensor_type
    dtype = _dtype(tt.elem_type, what) if tt.elem_type else None
    if not tt.HasField("shape"):
        return dtype, None
    return dtype, _shape(vi, what)
