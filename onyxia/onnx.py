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
from onnx import numpy_helper

from onyxia.errors import ModelLoadError, OnyxiaError
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind
from onyxia.ir.shapes import Dim, SymDim, parse_dim

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def read_model_proto(source: ModelSource) -> onnx.ModelProto:
    """Parse a model (with its external data) without any IR conversion."""
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            return onnx.load_model_from_string(bytes(source))
        path = Path(source)
        if not path.is_file():
            raise ModelLoadError(f"model file '{path}' does not exist")
        return onnx.load(str(path), load_external_data=True)
    except OnyxiaError:
        raise
    except Exception as exc:  # protobuf DecodeError, truncated external data, ...
        what = f"'{source}'" if not isinstance(source, (bytes, bytearray)) else "the model bytes"
        raise ModelLoadError(f"cannot read {what} as an ONNX model: {type(exc).__name__}: {exc}") from exc


def load_model(source: ModelSource) -> IrGraph:
    """Load an ONNX model into an IrGraph."""
    proto = read_model_proto(source)
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise ModelLoadError("the model has no graph (empty or not an ONNX file)")
    opsets = {_domain(o.domain): int(o.version) for o in proto.opset_import}
    opsets.setdefault("", 21 if not proto.opset_import else opsets.get("", 21))
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
        dtype, shape = _value_info(vi, f"input '{vi.name}'", taken)
        graph.add_tensor(TensorDef(vi.name, dtype, shape, TensorKind.INPUT))
        graph.inputs.append(vi.name)

    for index, np_node in enumerate(proto.graph.node):
        name = np_node.name or f"{np_node.op_type}_{index}"
        attrs = {a.name: _attribute(a, name) for a in np_node.attribute}
        if np_node.op_type == "Constant" and _domain(np_node.domain) == "":
            _add_constant(graph, name, np_node, attrs)
            continue
        inputs = [t if t else None for t in np_node.input]
        graph.add_node(np_node.op_type, inputs, _outputs(graph, name, np_node), attrs,
                       domain=_domain(np_node.domain), name=name)

    for vi in proto.graph.output:
        graph.outputs.append(vi.name)
        t = graph.tensors.get(vi.name)
        if t is not None and t.kind is TensorKind.INTERMEDIATE:
            t.kind = TensorKind.OUTPUT
    if not graph.outputs:
        raise ModelLoadError("the model declares no graph outputs")
    graph.validate()
    return graph


def _outputs(graph: IrGraph, node_name: str, node: onnx.NodeProto) -> list[str]:
    """Output names, with a private name for each absent optional output (""), so that two
    nodes with absent outputs (every layer's SkipSimplifiedLayerNormalization) do not both
    "produce" tensor ''. Positions are kept: Split (before opset 18) counts its outputs."""
    return [n or graph.fresh_name(f"{node_name}/absent_output_{i}") for i, n in enumerate(node.output)]


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _dtype(elem_type: int, what: str) -> dtypes.DType:
    try:
        return dtypes.from_onnx(elem_type)
    except OnyxiaError as exc:
        raise ModelLoadError(f"{what}: {exc}") from None


def _to_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
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
    return dtype, tuple(shape)


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
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return _to_array(value, f"node '{node_name}' attribute '{attr.name}'")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    return value


def _add_constant(graph: IrGraph, name: str, node: onnx.NodeProto, attrs: dict[str, Any]) -> None:
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
    out = node.output[0]
    if out in graph.tensors:
        raise ModelLoadError(f"tensor '{out}' is produced twice (Constant node '{name}')")
    graph.add_tensor(TensorDef(out, dtypes.from_numpy(array.dtype), tuple(array.shape), TensorKind.WEIGHT, array))


def node_attributes(node: onnx.NodeProto, node_name: str) -> dict[str, Any]:
    """A NodeProto's attributes as the IR keeps them (strings decoded, tensors as arrays); for
    passes that splice ONNX nodes into a graph (FunctionExpansionPass)."""
    return {a.name: _attribute(a, node_name) for a in node.attribute}
