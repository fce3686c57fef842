"""The inputs of `onyxia run` and `onyxia bench`: given as --input files, the rest random, with
integer inputs kept within the rows of the weight tables they index."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Ops an integer input may pass through, its values unchanged, on its way to a Gather's indices.
_KEEPS_VALUES = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"})
_INT_HIGH = 8  # random integer inputs take values in [0, 8) unless a table they index is smaller


def index_bounds(path: str) -> dict[str, int]:
    """Graph inputs of the ONNX model at `path` that reach a Gather's indices (through ops that
    keep values) -> the rows of the smallest weight table they index: a random feed stays in
    range (BERT's token_type_ids index a table of 2). Empty for a plan or an LLM folder."""
    import onnx

    if Path(path).is_dir() or not path.endswith(".onnx"):
        return {}
    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # noqa: BLE001 - unreadable here: the load reports it properly
        return {}
    rows = {init.name: list(init.dims) for init in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    bounds: dict[str, int] = {}
    for graph_input in graph.input:
        todo, seen = [graph_input.name], set()
        while todo:
            tensor = todo.pop()
            seen.add(tensor)
            for node in consumers.get(tensor, ()):
                if node.op_type in _KEEPS_VALUES and node.input[0] == tensor:
                    todo.extend(o for o in node.output if o not in seen)
                elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == tensor:
                    dims = rows.get(node.input[0])
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    if dims and -len(dims) <= axis < len(dims) and dims[axis] > 0:
                        bounds[graph_input.name] = min(bounds.get(graph_input.name, dims[axis]), dims[axis])
    return bounds


def _random_input(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator,
                  high: int = _INT_HIGH) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, high, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def feeds_for(exe, compiled, inputs: Sequence[str] | None, seed: int,
           bounds: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """The run's inputs: --input files, the rest random (integers in [0, 8), or below the rows
    of a table they index: `bounds`, from index_bounds)."""
    from onyxia.errors import InputError
    from onyxia.ir import dtypes

    given: dict[str, np.ndarray] = {}
    for item in inputs or ():
        name, sep, path = item.partition("=")
        if not sep:
            raise InputError(f"--input expects NAME=FILE.npy, got '{item}'")
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}: cannot read '{path}' ({exc})") from None
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in compiled.inputs:
        if name in given:
            feeds[name] = given.pop(name)
        else:
            dtype = dtypes.from_name(compiled.tensors[name].dtype).numpy
            high = min(_INT_HIGH, (bounds or {}).get(name, _INT_HIGH))
            feeds[name] = _random_input(exe.input_shape(name), dtype, rng, high)
    if given:
        raise InputError(f"--input names unknown inputs {sorted(given)} (inputs: {', '.join(compiled.inputs)})")
    return feeds
