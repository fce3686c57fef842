"""ONNX → IrGraph.

Reads a path, bytes or ModelProto (external data included), records the opset of each domain,
turns dim_param strings into symbols (dim_value into ints, absent dims into fresh symbols) and
initializers and Constant nodes into valued weight tensors. Problems in the file surface as
ModelLoadError naming the element at fault, never as a protobuf traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onyxia.errors import ModelLoadError, OnyxiaError
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind
from onyxia.ir.shapes import Dim, SymDim, parse_dim
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
    for vi in proto.graph.input:
        if vi.name in graph.tensors:  # an input with a default value (initializer): a weight
            continue
        dtype, shape = _value_info(vi, f"input '{vi.name}'")
        graph.add_tensor(TensorDef(vi.name, dtype, shape, TensorKind.INPUT))
        graph.inputs.append(vi.name)

    for index, np_node in enumerate(proto.graph.node):
        name = node_label(np_node, index)
        attrs = {a.name: _attribute(a, name) for a in np_node.attribute}
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


def _value_info(vi: onnx.ValueInfoProto, what: str) -> tuple[dtypes.DType, tuple[Dim, ...]]:
    if not vi.type.HasField("tensor_type"):
        raise ModelLoadError(f"{what} is not a tensor (sequence/map/optional types are not supported)")
    tt = vi.type.tensor_type
    dtype = _dtype(tt.elem_type, what)
    if not tt.HasField("shape"):
        raise ModelLoadError(f"{what} has no shape; give it a rank in the model")
    shape: list[Dim] = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param.strip():
            try:
                shape.append(parse_dim(d.dim_param))
            except OnyxiaError as exc:
                raise ModelLoadError(f"{what} dim {i}: {exc}") from None
        else:  # no name in the model: make one the user can bind with --dim
            shape.append(SymDim.symbol(f"{vi.name}_dim{i}"))
    return dtype, tuple(shape)


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
