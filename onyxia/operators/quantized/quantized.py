"""Quantized operators (com.microsoft): MatMulNBits, GatherBlockQuantized (4-bit).

Weights stay packed on the device and are dequantized in registers by the kernels; they are
never expanded on the host. uint8 tensors are stored as they are, 4 bytes to a word (see
ir/dtypes.py), so the kernels read the packed weights a word (8 weights) at a time.

Semantics (onnxruntime contrib docs): w[n, k] = (q[n, k] - zero_point) * scale with one scale
and zero point per block of `block_size` along K; the default zero point is 8 (2^(bits-1));
zero points are uint8 (two 4-bit values per byte, low nibble first, rows padded to whole
bytes) or floats of the scales' type.

MatMulNBits `accuracy_level = 4` (what onnxruntime-genai's builder writes for int4 models) makes
onnxruntime quantize the activation to int8 per block of `block_size` (scale = max|a| / 127) and
take integer dot products with the 4-bit weights; its results differ from an f32-activation
product by ~1e-2 relative, enough to change greedy tokens. onyxia does the same
(shaders/quantized/quantize_q8.wgsl, then matmul_nbits_q8.wgsl with dot4I8Packed, or plain
byte products with `MatMulNBits(packed_dot=False)`). Levels 0-3 keep f32 activations.

Kernels per kind of adapter (the heuristic of operators/matmul/gemv.py): on a CPU-type adapter the
chunked kernels (quantize_q8_chunked.wgsl + matmul_nbits_chunked.wgsl: no barriers, each
invocation streams its own columns' packed rows; int8 activations paired for 16-bit-lane
products instead of dot4I8Packed), wherever blocks hold whole vec4 word groups; elsewhere the
coalesced gemv / q8 kernels and the tiled one for many rows with f32 activations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import Buf, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.matmul.epilogue import fused_epilogue
from onyxia.operators.matmul.gemv import CHUNKED_MAX_M
from onyxia.plan import ALWAYS, Step, adapter, at_most

DOMAIN = "com.microsoft"
GEMV_MAX_ROWS = 4  # rows one gemv workgroup covers (matmul_nbits_gemv.wgsl ROWS)
# Word groups (32 weights) the chunked kernel's invocation walks at most: its loops stay far
# below the ~65k iterations after which lavapipe stops them.
CHUNKED_MAX_GROUPS = 16384
QUANTIZE_THREADS = 16  # quantize_q8_chunked.wgsl's workgroup size
# Longest row RmsNormQ8 normalizes: its 8-thread (CPU-type adapter) kernel's loops run ~11 K / 64
# times, kept below lavapipe's ~65,535.
RMSNORM_Q8_MAX_K = 32 * 8192


def packed_shape(ctx: InferenceCtx, i: int) -> Shape:
    """Shape of packed uint8 input `i`."""
    return ctx.input_shape(i)


def _check_packed(ctx: InferenceCtx, i: int, what: str) -> None:
    if ctx.input_dtype(i).name != "uint8":
        raise ctx.fail(f"{what} must be uint8 (packed 4-bit values), got {ctx.input_dtype(i)}", i)


def _check_bits_and_block(ctx: InferenceCtx, default_bits: int = 4) -> int:
    bits = int(ctx.attr("bits", default_bits))
    if bits != 4:
        raise ctx.fail(f"attribute 'bits' = {bits} is not supported by onyxia (4-bit weights only)")
    block = int(ctx.attr("block_size"))
    if block < 16 or block & (block - 1):
        raise ctx.fail(f"attribute 'block_size' = {block} must be a power of two >= 16")
    return block


def _zero_point_defs(ctx: PlanCtx, i: int) -> tuple[dict, dict[str, str]]:
    """(defs, reads) for an optional zero-point input."""
    if not ctx.has_input(i):
        return {}, {}
    return {"ZP_FLOAT" if ctx.input_dtype(i).is_float else "ZP_PACKED": True}, {"zp": ctx.input(i)}


# ---- MatMulNBits --------------------------------------------------------------------------

@dataclass(frozen=True)
class NBitsSpec:
    """A MatMulNBits node's validated attributes (K, N static; the shared dims of infer and plan)."""

    dtype: DType
    k: int
    n: int
    block: int  # block_size along K
    nblk: int  # blocks per row of B
    zp_row: int  # bytes per row of packed 4-bit zero points


class MatMulNBits(Operator):
    """y = a @ dequant(B)^T (+ bias) with 4-bit block-quantized B [N, n_blocks, block_size / 2].

    packed_dot: accuracy_level 4's coalesced kernel uses WGSL's dot4I8Packed (False: byte-by-byte
    products); the chunked one multiplies paired 16-bit lanes and needs neither.
    """

    op_type = "MatMulNBits"
    domain = DOMAIN

    def __init__(self, packed_dot: bool = True):
        self.packed_dot = packed_dot

    def spec(self, ctx: InferenceCtx) -> NBitsSpec:
        block = _check_bits_and_block(ctx)
        k, n = int(ctx.attr("K")), int(ctx.attr("N"))
        if ctx.attr("weight_prepacked", 0):
            raise ctx.fail("attribute 'weight_prepacked' (CUDA layouts) is not supported by onyxia")
        if ctx.has_input(4):
            raise ctx.fail("input 'g_idx' (deprecated act-order layout) is not supported by onyxia", 4)
        a = ctx.input_shape(0)
        dtype = ctx.input_dtype(0)
        if not dtype.is_float:
            raise ctx.fail(f"A must be float32/float16, got {dtype}", 0)
        if not a or not ctx.same_dim(a[-1], k):
            raise ctx.fail(f"A's last dim must be K = {k}, got {shape_str(a)}", 0)
        nblk = ceil_div(k, block)
        _check_packed(ctx, 1, "B")
        if not ctx.same_dim(numel(packed_shape(ctx, 1)), n * nblk * block // 2):
            raise ctx.fail(f"B must be [N, n_blocks, block_size / 2] = [{n}, {nblk}, {block // 2}], got "
                           f"{shape_str(packed_shape(ctx, 1))}", 1)
        if not ctx.input_dtype(2).is_float or not ctx.same_dim(numel(ctx.input_shape(2)), n * nblk):
            raise ctx.fail(f"scales must be {n * nblk} floats ([N, n_blocks]), got {ctx.input_dtype(2)}"
                           f"{shape_str(ctx.input_shape(2))}", 2)
        zp_row = (nblk + 1) // 2
        if ctx.has_input(3):
            if ctx.input_dtype(3).is_float:
                expected = n * nblk
            else:
                _check_packed(ctx, 3, "zero_points")
                expected = n * zp_row
            if not ctx.same_dim(numel(packed_shape(ctx, 3)), expected):
                raise ctx.fail(f"zero_points must hold {expected} elements, got "
                               f"{shape_str(packed_shape(ctx, 3))}", 3)
        if ctx.has_input(5) and not ctx.same_dim(numel(ctx.input_shape(5)), n):
            raise ctx.fail(f"bias must be [N] = [{n}]", 5)
        return NBitsSpec(dtype, k, n, block, nblk, zp_row)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self.spec(ctx)
        return [(c.dtype, tuple(ctx.input_shape(0)[:-1]) + (c.n,))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self.spec(ctx)
        k, n, block = c.k, c.n, c.block
        m = numel(ctx.input_shape(0)[:-1])
        if isinstance(m, int) and m == 0:
            return []
        zp_defs, zp_reads = _zero_point_defs(ctx, 3)
        epilogue_defs, epilogue_reads = self.epilogue(ctx)
        reads: dict[str, str | Buf] = {"b": ctx.input(1), "scales": ctx.input(2), **zp_reads, **epilogue_reads}
        defs: dict[str, object] = {**zp_defs, **epilogue_defs}
        if ctx.attr(TILES_ATTR, 0):  # B and scales in tiles (compiler/passes/nbits_tiles.py)
            if not tiles_apply(c):
                raise ctx.fail(f"attribute {TILES_ATTR} needs block_size 32, an even block count and N a multiple "
                               f"of {TILE_COLUMNS}")
            defs["TILED"] = True
        if ctx.has_input(5):
            reads["bias"] = ctx.input(5)
            defs["HAS_BIAS"] = True
        q8 = int(ctx.attr("accuracy_level", 0)) == 4
        if q8 and c.block > 256:
            raise ctx.fail(f"accuracy_level 4 with block_size {c.block} is not supported by onyxia (at most 256)")
        # Which kernel runs (one Select): on a CPU-type adapter the chunked kernel, for every row
        # count with int8 activations, up to CHUNKED_MAX_M rows with f32 ones; elsewhere the
        # coalesced kernel for few rows, the tiled one for many (with int8: the q8 kernel).
        alternatives = []
        if _chunked_applies(c):
            prefer = adapter("cpu") if q8 else adapter("cpu") & at_most(m, CHUNKED_MAX_M)
            alternatives.append(("chunked", _plan_chunked(ctx, c, m, q8, defs, reads, self.shared_activation(ctx)),
                                 ALWAYS, prefer))
        if k % 8:
            defs["K_TAIL"] = True
        if q8:
            alternatives.append(("q8", self._plan_int8(ctx, c, m, defs, reads), ALWAYS, ALWAYS))
            return ctx.select("matmul_nbits", alternatives)
        gemv_reads = {"a": Buf(ctx.input(0), vector=k % 8 == 0), **reads}
        reads = {"a": ctx.input(0), **reads}
        params = {"M": m, "N": n, "K": k, "BLOCK": block, "NBLK": c.nblk, "ROW_WORDS": c.nblk * block // 8,
                  "KWORDS": ceil_div(k, 8), "ZP_ROW": c.zp_row}
        gemv = ctx.dispatch("quantized/matmul_nbits_gemv.wgsl", label="matmul_nbits_gemv", defs=defs,
                            params=params, reads=gemv_reads, writes={"y": ctx.output(0)},
                            workgroups=(ceil_div(n, 8), 1, ceil_div(m, GEMV_MAX_ROWS)))
        tiled = ctx.dispatch("quantized/matmul_nbits_tiled.wgsl", label="matmul_nbits_tiled", defs=defs,
                             params=params, reads=reads, writes={"y": ctx.output(0)},
                             workgroups=(ceil_div(n, 64), ceil_div(m, 64), 1))
        alternatives += [("coalesced", [gemv], ALWAYS, at_most(m, GEMV_MAX_ROWS)), ("tiled", [tiled], ALWAYS, ALWAYS)]
        return ctx.select("matmul_nbits", alternatives)

    def shared_activation(self, ctx: PlanCtx) -> dict[str, str | Buf] | None:
        """The chunked kernel's int8 activation when another node made it (MatMulNBitsShared)."""
        return None

    def epilogue(self, ctx: PlanCtx) -> tuple[dict[str, object], dict[str, str | Buf]]:
        """(defs, reads) of fused elementwise ops after the product (MatMulNBitsShared)."""
        return {}, {}

    def _plan_int8(self, ctx: PlanCtx, c: NBitsSpec, m, defs: dict, reads: dict[str, str | Buf]) -> list[Step]:
        """accuracy_level 4: quantize a per block to int8, then integer dots with the weights."""
        # int8 activations, 4 to a word as dot4I8Packed takes them (the kernels read whole words)
        qa = ctx.scratch(m * c.nblk * c.block, "int8", "qa")
        sa = ctx.scratch(m * c.nblk, "float32", "sa")
        quantize = ctx.dispatch(
            "quantized/quantize_q8.wgsl", label="quantize_q8",
            params={"M": m, "K": c.k, "BLOCK": c.block, "NBLK": c.nblk},
            reads={"a": ctx.input(0)}, writes={"qa": Buf(qa, whole_words=True), "sa": sa},
            workgroups=(c.nblk, m, 1))
        q8_defs = {k: v for k, v in defs.items() if k != "K_TAIL"}
        if not self.packed_dot:
            q8_defs["PLAIN_DOT"] = True
        matmul = ctx.dispatch(
            "quantized/matmul_nbits_q8.wgsl", label="matmul_nbits_q8", defs=q8_defs,
            params={"M": m, "N": c.n, "BLOCK": c.block, "NBLK": c.nblk, "ROW_WORDS": c.nblk * c.block // 8,
                    "ZP_ROW": c.zp_row},
            reads={"qa": qa, "sa": sa, **reads}, writes={"y": ctx.output(0)},
            workgroups=(ceil_div(c.n, 8), 1, ceil_div(m, GEMV_MAX_ROWS)))
        return [quantize, matmul]


# B and scales in tiles (compiler/passes/nbits_tiles.py): the node attribute, and the columns of
# one tile (the chunked kernel's workgroup: 8 invocations x 8 columns).
TILES_ATTR = "onyxia_nbits_tiles"
TILE_COLUMNS = 64


def tiles_apply(c: NBitsSpec) -> bool:
    """Whether B and scales can be stored in tiles: whole tiles of columns, pairs of 32-blocks."""
    return c.block == 32 and c.nblk % 2 == 0 and c.n % TILE_COLUMNS == 0


def tile_nbits(b: np.ndarray, scales: np.ndarray, n: int, nblk: int) -> tuple[np.ndarray, np.ndarray]:
    """B [N, nblk, 16] (uint8) and scales [N * nblk] in tiles, each keeping its shape and dtype:
    unit (a column's two blocks: 32 bytes of B, 2 scales) of column n = 64 g + 8 l + c and block
    pair p goes to position ((g * nblk / 2 + p) * 8 + c) * 8 + l, as shaders/quantized/
    nbits_index.wgsl reads it."""
    def tiles(a: np.ndarray, unit: int) -> np.ndarray:
        units = a.reshape(n // TILE_COLUMNS, 8, 8, nblk // 2, unit)  # (g, l, c, p, unit)
        return np.ascontiguousarray(units.transpose(0, 3, 2, 1, 4)).reshape(a.shape)
    return tiles(b, 32), tiles(scales, 2)


def _chunked_applies(c: NBitsSpec) -> bool:
    """Whole vec4 word groups per block (block >= 32), no K tail, loops bounded (K / 32 walks)."""
    return c.block >= 32 and c.k % c.block == 0 and c.k <= 32 * CHUNKED_MAX_GROUPS


def _quantize_chunked(ctx: PlanCtx, m: Dim, k: int, block: int, qa: str, sa: str, qsum: str) -> Step:
    """quantize_q8_chunked.wgsl: a [M, K] to int8 per block, in the chunked kernel's layout."""
    nblk = ceil_div(k, block)
    return ctx.dispatch("quantized/quantize_q8_chunked.wgsl", label="quantize_q8_chunked",
                        params={"M": m, "K": k, "BLOCK": block, "NBLK": nblk},
                        reads={"a": ctx.input(0)}, writes={"qa": qa, "sa": sa, "qsum": qsum},
                        workgroups=ctx.grid(m * nblk, QUANTIZE_THREADS))


def _plan_chunked(ctx: PlanCtx, c: NBitsSpec, m: Dim, q8: bool, defs: dict,
                  reads: dict[str, str | Buf], shared: dict[str, str | Buf] | None = None) -> list[Step]:
    """matmul_nbits_chunked.wgsl (after quantize_q8_chunked.wgsl with int8 activations, unless
    `shared` holds them already): the dispatch of M's row class (ROWS 1 for decode, 4 above),
    a Select of both when M is symbolic."""
    steps: list[Step] = []
    # B's words (and with PAIRED the scales) read in pairs: two blocks (PAIRED) or two word
    # groups of one block (GROUP_PAIRS) an iteration; 64-bit loads where the device has them.
    paired, group_pairs = c.block == 32 and c.nblk % 2 == 0, c.block >= 64
    defs = {**defs, "PAIRED": paired, "GROUP_PAIRS": group_pairs}
    reads = {**reads, "b": Buf(ctx.input(1), raw=True, vector=True, wide=paired or group_pairs)}
    if paired:
        reads["scales"] = Buf(ctx.input(2), wide=True)
    if q8 and shared is not None:
        activation: dict[str, str | Buf] = shared
    elif q8:
        qa = ctx.scratch(m * c.nblk * c.block // 2, "uint32", "qa")  # 2 words a value (pair words)
        sa = ctx.scratch(m * c.nblk, "float32", "sa")
        qsum = ctx.scratch(m * c.nblk, "float32", "qsum")
        steps.append(_quantize_chunked(ctx, m, c.k, c.block, qa, sa, qsum))
        activation = {"qa": Buf(qa, vector=True), "sa": sa, "qsum": qsum}
    else:
        activation = {"a": Buf(ctx.input(0), vector=True)}
    params = {"M": m, "N": c.n, "BLOCK": c.block, "NBLK": c.nblk, "ROW_WORDS": c.nblk * c.block // 8,
              "ZP_ROW": c.zp_row}

    def rows_class(rows: int) -> list[Step]:
        return [ctx.dispatch(  # 8 invocations x 8 columns a workgroup
            "quantized/matmul_nbits_chunked.wgsl", label="matmul_nbits_chunked", defs={**defs, "Q8": q8, "ROWS": rows},
            params=params, reads={**activation, **reads}, writes={"y": ctx.output(0)},
            workgroups=(ceil_div(c.n, 64), 1, ceil_div(m, rows)))]

    steps += ctx.select("matmul_nbits_chunked/rows", [("rows1", rows_class(1), ALWAYS, at_most(m, 1)),
                                                       ("rows4", rows_class(4), ALWAYS, ALWAYS)])
    return steps


# ---- one int8 activation for several MatMulNBits (passes/quantize_sharing.py) --------------

def chunked_q8(c: NBitsSpec, accuracy_level: int) -> bool:
    """Whether a MatMulNBits runs the chunked int8 kernels on a CPU-type adapter."""
    return accuracy_level == 4 and c.block <= 256 and _chunked_applies(c)


class QuantizeQ8(Operator):
    """onyxia::QuantizeQ8(a) -> (qa, sa, qsum): accuracy_level 4's int8 activation as
    quantize_q8_chunked.wgsl writes it (attributes K, block_size), made once for every
    MatMulNBitsShared that reads `a`. Runs on a CPU-type adapter only, where the chunked
    kernels do; elsewhere each consumer quantizes for its own coalesced kernel."""

    op_type = "QuantizeQ8"
    domain = FUSED_DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        k, block = int(ctx.attr("K")), int(ctx.attr("block_size"))
        lead, nblk = tuple(ctx.input_shape(0)[:-1]), ceil_div(k, block)
        return [(dtypes.UINT32, lead + (nblk * block // 2,)), (dtypes.FLOAT32, lead + (nblk,)),
                (dtypes.FLOAT32, lead + (nblk,))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        m = numel(ctx.input_shape(0)[:-1])
        if isinstance(m, int) and m == 0:
            return []
        # Only the chunked kernels, which run on a CPU-type adapter, read it.
        quantize = _quantize_chunked(ctx, m, int(ctx.attr("K")), int(ctx.attr("block_size")), ctx.output(0),
                                     ctx.output(1), ctx.output(2))
        return ctx.select("quantize_q8", [("cpu", [quantize], ALWAYS, adapter("cpu")), ("other", [], ALWAYS, ALWAYS)])


class RmsNormQ8(Operator):
    """onyxia::RmsNormQ8(x, [skip], gamma, [bias]) -> (y, qa, sa, qsum, [sum]): an RMS norm over
    the last axis ((Skip)SimplifiedLayerNormalization: attributes epsilon, skip, bias, sum) that
    also writes QuantizeQ8's outputs (attributes K, block_size): shaders/llm/rmsnorm_q8.wgsl.
    float32 only (a float16 y would be rounded before its quantization). With attribute
    y_nbits_only (y feeds only MatMulNBitsShared nodes) a CPU-type adapter's kernel leaves y
    unwritten: those nodes read the int8 activation there."""

    op_type = "RmsNormQ8"
    domain = FUSED_DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x = (ctx.input_dtype(0), tuple(ctx.input_shape(0)))
        return [x, *QuantizeQ8().infer(ctx)] + ([x] if ctx.attr("sum", 0) else [])

    def plan(self, ctx: PlanCtx) -> list[Step]:
        k, block = int(ctx.attr("K")), int(ctx.attr("block_size"))
        m = numel(ctx.input_shape(0)[:-1])
        if isinstance(m, int) and m == 0:
            return []
        reads: dict[str, str | Buf] = {"x": Buf(ctx.input(0), vector=True), "gamma": Buf(ctx.input(2), vector=True)}
        writes: dict[str, str | Buf] = {"y": ctx.output(0), "qa": ctx.output(1), "sa": ctx.output(2),
                                        "qsum": ctx.output(3)}
        defs: dict[str, object] = {"SKIP": ctx.has_input(1), "HAS_BIAS": ctx.has_input(3),
                                   "SUM_OUT": bool(ctx.attr("sum", 0))}
        if defs["SKIP"]:
            reads["skip"] = Buf(ctx.input(1), vector=True)
        if defs["HAS_BIAS"]:
            reads["bias"] = Buf(ctx.input(3), vector=True)
        if defs["SUM_OUT"]:
            writes["s"] = ctx.output(4)
        # y feeds only the MatMulNBits consumers' coalesced kernels (attribute y_nbits_only, set
        # by the pass): on a CPU-type adapter they read the int8 activation and y goes unwritten.
        # 64 threads a row, or 8 on a CPU-type adapter (each barrier there switches between the
        # workgroup's groups of 8 threads).
        params = {"M": m, "K": k, "BLOCK": block, "NBLK": ceil_div(k, block),
                  "EPS": (float(ctx.attr("epsilon")), "f32")}

        def variant(wg: int, store_y: int) -> list[Step]:
            return [ctx.dispatch("llm/rmsnorm_q8.wgsl", label="rmsnorm_q8", defs={**defs, "WG": wg},
                                 params={**params, "STORE_Y": (store_y, "u32")}, reads=reads, writes=writes,
                                 workgroups=ctx.grid(m, 1))]

        cpu_store_y = 0 if ctx.attr("y_nbits_only", 0) else 1
        return ctx.select("rmsnorm_q8", [("cpu", variant(8, cpu_store_y), ALWAYS, adapter("cpu")),
                                         ("gpu", variant(64, 1), ALWAYS, ALWAYS)])


class MatMulNBitsShared(MatMulNBits):
    """onyxia::MatMulNBitsShared: MatMulNBits (inputs 0-5 as there) whose chunked kernel reads the
    int8 activation of a QuantizeQ8 node (inputs 6-8: qa, sa, qsum, when present) instead of
    making its own, and whose kernels may end with fused elementwise ops (an epilogue: inputs 9
    on hold its other operands; passes/epilogue_fusion.py)."""

    op_type = "MatMulNBitsShared"
    domain = FUSED_DOMAIN

    def shared_activation(self, ctx: PlanCtx) -> dict[str, str | Buf] | None:
        if not ctx.has_input(6):
            return None
        return {"qa": Buf(ctx.input(6), vector=True), "sa": ctx.input(7), "qsum": ctx.input(8)}

    def epilogue(self, ctx: PlanCtx) -> tuple[dict[str, object], dict[str, str | Buf]]:
        return quantized_epilogue(ctx)


def quantized_epilogue(ctx: PlanCtx) -> tuple[dict[str, object], dict[str, str | Buf]]:
    """Attributes `epilogue_exprs` / `epilogue_inputs` (operands after the product's inputs; see
    operators/matmul/epilogue.py) as shaders/quantized/epilogue.wgsl's defs and reads, for the
    kernels that end in nbits_epilogue(v, m, n) (MatMulNBitsShared, DynamicQuantMatMul,
    MatMulBnb4). An operand is read at (m, n) as the [M, N] output's shape, as an [N] row or as a
    scalar (the pass checked it is one of these: these kernels take no broadcast index params)."""
    epilogue = fused_epilogue(ctx, ctx.output_shape(0), flat="m * N() + n")
    if epilogue.params:
        raise ctx.fail("an epilogue operand broadcasts other than as the output, an [N] row or a scalar")
    return epilogue.defs, epilogue.reads


# ---- GatherBlockQuantized -----------------------------------------------------------------

@dataclass(frozen=True)
class GatherBlockSpec:
    dtype: DType
    logical: tuple[int, ...]  # the data's shape in 4-bit values (twice the packed last axis)
    block: int
    nblk: int  # blocks per row
    zp_row: int  # bytes per row of packed zero points


class GatherBlockQuantized(Operator):
    """Gather rows of a 4-bit block-quantized uint8 table (the embeddings of int4 models)."""

    op_type = "GatherBlockQuantized"
    domain = DOMAIN

    def spec(self, ctx: InferenceCtx) -> GatherBlockSpec:
        block = _check_bits_and_block(ctx)
        _check_packed(ctx, 0, "data")
        packed = packed_shape(ctx, 0)
        rank = len(packed)
        if rank < 2:
            raise ctx.fail(f"data must be a static tensor of rank >= 2, got {shape_str(packed)}", 0)
        packed = tuple(ctx.literals(packed, "data's shape", 0))
        logical = tuple(packed[:-1]) + (packed[-1] * 2,)  # two 4-bit values per byte along the last axis
        if ctx.axis(int(ctx.attr("gather_axis", 0)), rank, "gather_axis") != 0:
            raise ctx.fail("attribute 'gather_axis' must be 0 for uint8 data")
        if ctx.axis(int(ctx.attr("quantize_axis", 1)), rank, "quantize_axis") != rank - 1:
            raise ctx.fail("attribute 'quantize_axis' must be the last axis for packed 4-bit data")
        if not ctx.input_dtype(1).is_integer:
            raise ctx.fail(f"indices must be int32/int64, got {ctx.input_dtype(1)}", 1)
        nblk = ceil_div(logical[-1], block)
        scales = tuple(logical[:-1]) + (nblk,)
        dtype = ctx.input_dtype(2)
        if not dtype.is_float or not ctx.same_shape(ctx.input_shape(2), scales):
            raise ctx.fail(f"scales must be float {shape_str(scales)}, got {dtype}{shape_str(ctx.input_shape(2))}", 2)
        zp_row = (nblk + 1) // 2
        if ctx.has_input(3):
            _check_packed(ctx, 3, "zero_points")
            if not ctx.same_dim(numel(packed_shape(ctx, 3)), numel(scales[:-1]) * zp_row):
                raise ctx.fail(f"zero_points must be uint8 {list(scales[:-1]) + [zp_row]}", 3)
        return GatherBlockSpec(dtype, logical, block, nblk, zp_row)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self.spec(ctx)
        return [(c.dtype, tuple(ctx.input_shape(1)) + c.logical[1:])]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self.spec(ctx)
        total = numel(ctx.output_shape(0))
        if isinstance(total, int) and total == 0:
            return []
        logical = c.logical
        zp_defs, zp_reads = _zero_point_defs(ctx, 3)
        return [ctx.dispatch("quantized/gather_block_quantized.wgsl", label="gather_block_quantized", defs=zp_defs,
                             params={"N": total, "R": numel(logical[1:]), "ROWS": logical[0], "QDIM": logical[-1],
                                     "NBLK": c.nblk, "BLOCK": c.block, "ZP_ROW": c.zp_row},
                             reads={"b": ctx.input(0), "idx": ctx.input(1), "scales": ctx.input(2), **zp_reads},
                             writes={"y": ctx.output(0)},
                             workgroups=ctx.grid(total))]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(MatMulNBits(), 1), (GatherBlockQuantized(), 1), (QuantizeQ8(), 1), (MatMulNBitsShared(), 1),
            (RmsNormQ8(), 1)]


__all__ = ["RMSNORM_Q8_MAX_K", "GatherBlockQuantized", "MatMulNBits", "MatMulNBitsShared", "QuantizeQ8", "RmsNormQ8",
           "chunked_q8", "operators", "quantized_epilogue"]
