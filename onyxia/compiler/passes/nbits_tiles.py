"""NBitsTilesPass: constant 4-bit MatMulNBits weights (B and its scales) stored in the tiles the
chunked kernel streams best.

matmul_nbits_chunked.wgsl (the CPU-type adapter's kernel) gives each workgroup 64 columns, each
invocation 8 of them, and walks K two blocks an iteration: a load instruction of its 8 lanes
reads 8 columns' units (a column's two blocks: 32 bytes of B, 2 scales). Row-major, those sit a
row apart (K / 2 bytes), so a workgroup streams 64 places at once. In tiles, the 64 units one
iteration reads lie together ((column group, block pair, column, lane) order), one run a
workgroup. Measured on lavapipe (Mesa 22.3, 2-core VM; raw-wgpu form of the kernel with its
weights cycled through 40 copies, as a decode step reads them from L3, not L2; medians of 9):
K x N = 512 x 1408 350 -> 293 us and 274 -> 212, 1408 x 512 317 -> 280 and 302 -> 245, 512 x
8000 1000 -> 879 and 1287 -> 1280. The ~30M int4 Llama compiled with and without this pass, in
one process, 9 interleaved generations each: decode 74 -> 84 tok/s.

Every kernel of the node reads B and scales through shaders/quantized/nbits_index.wgsl (def
TILED), the GPU-type ones included, so the plan holds one copy and stays adapter-neutral.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.errors import OnyxiaError
from onyxia.ir.graph import IrGraph, NodeId, TensorDef, TensorKind
from onyxia.operators.base import InferenceCtx
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.quantized.quantized import (
    DOMAIN,
    TILE_COLUMNS,
    TILES_ATTR,
    MatMulNBits,
    NBitsSpec,
    tile_nbits,
    tiles_apply,
)
from onyxia.operators.registry import resolve_operator

# (domain, op type) of the nodes whose B and scales may be stored in tiles.
PRODUCTS = {(DOMAIN, "MatMulNBits"), (FUSED_DOMAIN, "MatMulNBitsShared")}


@dataclass(frozen=True)
class TilesReport:
    """{weight: the nodes now reading it in tiles}, {weight: why it stays row-major}."""

    tiled: dict[str, list[str]]
    skipped: dict[str, str]


class NBitsTilesPass(Pass):
    """Optimization stage, last: after SplitLargeTensorsPass (whose pieces it lays out: each
    piece's own B and scales), SharedQuantizationPass and EpilogueFusionPass (whose
    MatMulNBitsShared nodes it rewrites like the plain ones).

    1. Finds each constant B (input 1) of a MatMulNBits or MatMulNBitsShared with constant
       scales (input 2), neither a graph input or output, read by such nodes only, as B and as
       scales (a tied embedding that a GatherBlockQuantized also reads stays as it is).
    2. Requires every reader to have the same K and N, bits 4, block_size 32, an even block
       count and N a multiple of 64 (whole tiles, pairs of blocks).
    3. Stores B and scales once in tiles as new weights `<name>/tiles` (same shapes and dtypes)
       and sets TILES_ATTR on every reader.
    4. Every weight left row-major gets its reason (TilesReport in ctx.reports["nbits-tiles"]).
    """

    name = "nbits-tiles"
    stage = Stage.OPTIMIZATION
    after = ("split-large-tensors", "quantize-sharing", "epilogue-fusion")

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        tiled: dict[str, list[str]] = {}
        skipped: dict[str, str] = {}
        weights = dict.fromkeys(graph.node(nid).inputs[1] for nid in graph.topological_order()
                                if _is_product(graph, nid) and len(graph.node(nid).inputs) > 2)
        for weight in weights:
            found = _declines(graph, ctx, weight)
            if isinstance(found, str):
                skipped[weight] = found
                continue
            readers, scales, spec = found
            b_tiles, s_tiles = tile_nbits(graph.tensor(weight).value, graph.tensor(scales).value, spec.n, spec.nblk)
            names = []
            for source, value in ((weight, b_tiles), (scales, s_tiles)):
                t = graph.tensor(source)
                name = graph.fresh_name(f"{source}/tiles")
                graph.add_tensor(TensorDef(name, t.dtype, tuple(value.shape), TensorKind.WEIGHT, value))
                names.append(name)
            for nid in readers:
                node = graph.node(nid)
                inputs = [names[i - 1] if i in (1, 2) else x for i, x in enumerate(node.inputs)]
                graph.replace_node(nid, node.op_type, inputs, {**node.attributes, TILES_ATTR: 1}, domain=node.domain)
            tiled[weight] = [graph.node(nid).name for nid in readers]
        ctx.reports[self.name] = TilesReport(tiled, skipped)
        return PassResult(bool(tiled), f"{len(tiled)} 4-bit weights in tiles; {len(skipped)} left row-major")


def _is_product(graph: IrGraph, nid: NodeId) -> bool:
    node = graph.node(nid)
    return (node.domain, node.op_type) in PRODUCTS


def _spec(graph: IrGraph, ctx: CompileContext, nid: NodeId) -> NBitsSpec | str:
    """The reader's weight geometry as its operator validates it, or why it cannot read tiles."""
    node = graph.node(nid)
    if TILES_ATTR in node.attributes:
        return f"'{node.name}' already reads its weights in tiles"
    op = resolve_operator(graph, ctx.registry, node)
    if not isinstance(op, MatMulNBits):  # a registered replacement knows nothing of tiles
        return f"'{node.name}' resolves to {type(op).__name__}, not the built-in MatMulNBits"
    try:
        return op.spec(InferenceCtx(graph, node, ctx))
    except OnyxiaError as error:
        return f"invalid node '{node.name}' ({error})"


def _declines(graph: IrGraph, ctx: CompileContext, weight: str | None) -> tuple[list[NodeId], str, NBitsSpec] | str:
    """(the nodes reading `weight`, their scales, their geometry), or why it stays."""
    if weight is None:
        return "no weight"
    t = graph.tensor(weight)
    if t.value is None:
        return "it is computed on the device: nothing to lay out at compile time"
    if weight in graph.inputs or weight in graph.outputs:
        return "it is a graph input or output"
    readers = sorted(graph.consumers(weight))
    specs: dict[tuple[int, int, int], NBitsSpec] = {}  # by (K, N, block_size)
    scales = set()
    for nid in readers:
        node = graph.node(nid)
        if not _is_product(graph, nid) or node.inputs.count(weight) != 1 or node.inputs[1] != weight:
            return f"{node.op_type} node '{node.name}' reads it other than as a MatMulNBits' B"
        found = _spec(graph, ctx, nid)
        if isinstance(found, str):
            return found
        specs[(found.k, found.n, found.block)] = found
        scales.add(node.inputs[2])
    if len(specs) != 1 or len(scales) != 1:
        return "its readers differ in K, N, block_size or scales"
    (spec,) = specs.values()
    if not tiles_apply(spec):
        return (f"K = {spec.k}, N = {spec.n}, block_size {spec.block}: tiles need block_size 32, an even block "
                f"count and N a multiple of {TILE_COLUMNS}")
    (scale,) = scales
    s = graph.tensor(scale)
    if s.value is None or scale in graph.inputs or scale in graph.outputs:
        return "its scales are not a constant weight"
    if sorted(graph.consumers(scale)) != readers or any(graph.node(nid).inputs.count(scale) != 1 for nid in readers):
        return "its scales are also read elsewhere"
    if t.value.size != spec.n * spec.nblk * 16 or s.value.size != spec.n * spec.nblk:
        return "its size is not [N, n_blocks, 16] with [N * n_blocks] scales"
    return readers, scale, spec


__all__ = ["NBitsTilesPass", "TilesReport"]
