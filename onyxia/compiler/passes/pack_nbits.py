"""PackNBitsWeightsPass: 4-bit packed weights stored four bytes to a device word.

Device storage is one 32-bit word per element, so a packed uint8 tensor uploaded as is would
take 4 bytes per byte. The quantized operators (operators/quantized.py) read whole words when
the pass has re-viewed an input, and one byte per word otherwise.
"""

from __future__ import annotations

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind
from onyxia.operators.quantized import DOMAIN, PACKED_INPUTS, WORDS_META


class PackNBitsWeightsPass(Pass):
    """Optimization stage; for every MatMulNBits / GatherBlockQuantized node:

    1. each constant uint8 packed input (weights; 4-bit zero points) is replaced by a uint32
       tensor holding the same bytes, 4 per word (little-endian, zero-padded to whole words):
       4x less device memory and one load per 8 weights;
    2. the original shape goes to node.meta[WORDS_META][input index], where the operators find it.
    A tensor shared by several nodes is re-viewed once. Non-constant inputs are left alone.
    """

    name = "pack-nbits-weights"
    stage = Stage.OPTIMIZATION
    # Splitting sizes 4-bit weights as packed bytes and cuts them by rows: it must see them unpacked.
    after = ("split-large-tensors",)

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        views: dict[str, str] = {}
        modified = False
        for nid in graph.topological_order():
            node = graph.node(nid)
            if node.domain != DOMAIN or node.op_type not in PACKED_INPUTS:
                continue
            inputs = list(node.inputs)
            for i in PACKED_INPUTS[node.op_type]:
                if i >= len(inputs) or inputs[i] is None or i in node.meta.get(WORDS_META, {}):
                    continue
                t = graph.tensor(inputs[i])
                if t.value is None or t.value.dtype != np.uint8:
                    continue
                if t.name not in views:
                    views[t.name] = self._add_words(graph, t)
                inputs[i] = views[t.name]
                node.meta.setdefault(WORDS_META, {})[i] = tuple(t.shape or t.value.shape)
                modified = True
            if inputs != node.inputs:
                graph.set_inputs(nid, inputs)
        return modified

    @staticmethod
    def _add_words(graph: IrGraph, t: TensorDef) -> str:
        raw = np.ascontiguousarray(t.value).reshape(-1)
        raw = np.concatenate([raw, np.zeros(-raw.size % 4, np.uint8)])
        words = np.frombuffer(raw.tobytes(), dtype="<u4").astype(np.uint32)
        name = graph.fresh_name(f"{t.name}/words")
        graph.add_tensor(TensorDef(name, dtypes.UINT32, (words.size,), TensorKind.WEIGHT, words))
        return name
