"""transformers.js' q8 decoders: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul as one kernel.

onnxruntime's quantize_dynamic writes each MatMul of a "q8" / "int8" / "uint8" decoder as
DynamicQuantizeLinear(x) -> (q, scale, zp), MatMulInteger(q, B, zp, B_zp) -> int32, Cast to
float and a Mul by scale * B_scale: the semantics of its own DynamicQuantizeMatMul. Run as
written that is a range reduction, an elementwise quantization, an int32 product and the tail,
per MatMul. passes/dynamic_quant_fusion.py rewrites each chain into one
onyxia::DynamicQuantMatMul(x, B, B_scale, [B_zp], [range]) whose kernel
(shaders/quantized/dynamic_quant_matmul.wgsl) quantizes x as it multiplies; where several
MatMuls read one x, an onyxia::DynamicRange(x) computes x's range once for all of them, used
when x has more than one row (for one row each kernel reduces the row itself: one dispatch
per MatMul in a decode step). B stays int8 / uint8 on the device, 4 to a word.
"""

from __future__ import annotations

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.quantized.quantized import quantized_epilogue
from onyxia.plan import ALWAYS, Step, adapter, at_least, at_most

# Longest K fused: a thread's loop over K (and with one row its range loop, K / WG) stays
# below lavapipe's ~65,535 iterations.
DQ_MAX_K = 32768
# Elements one DynamicRange workgroup reduces (dynamic_range.wgsl: 64 threads x 256).
RANGE_CHUNK = 64 * 256


def range_groups(total: Dim) -> Dim:
    """DynamicRange's workgroups (partial ranges) for x of `total` elements."""
    return ceil_div(total, RANGE_CHUNK)


def _range(ctx: PlanCtx, total: Dim, out: str) -> Step:
    """dynamic_range.wgsl: input 0's partial ranges into `out`."""
    groups = range_groups(total)
    return ctx.dispatch("quantized/dynamic_range.wgsl", label="dynamic_range", defs={"WG": 64},
                        params={"TOTAL": total, "GROUPS": groups},
                        reads={"x": ctx.input(0)}, writes={"range": out}, workgroups=ctx.grid(groups, 1))


class DynamicRange(Operator):
    """onyxia::DynamicRange(x) -> range f32 [GROUPS, 2]: min(0, ...) and max(0, ...) of each
    RANGE_CHUNK elements of x, the partial ranges DynamicQuantMatMul reduces to
    DynamicQuantizeLinear's scale. Runs only when x has more than one row (attribute K: x's
    last dim): with one row its readers reduce x themselves."""

    op_type = "DynamicRange"
    domain = FUSED_DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.input_dtype(0).name != "float32":
            raise ctx.fail(f"expects float32, got {ctx.input_dtype(0)}", 0)
        return [(dtypes.FLOAT32, (range_groups(numel(ctx.input_shape(0))), 2))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        m = numel(ctx.input_shape(0)[:-1])
        step = _range(ctx, numel(ctx.input_shape(0)), ctx.output(0))
        # Guarded as DynamicQuantMatMul's "ranged" alternatives are: more than one row.
        return ctx.select("dynamic_range", [("rows", [step], at_least(m, 2), ALWAYS), ("one-row", [], ALWAYS, ALWAYS)])


class DynamicQuantMatMul(Operator):
    """onyxia::DynamicQuantMatMul(x f32 [..., K], B int8|uint8 [K, N], B_scale f32 [] | [N],
    [B_zp int8|uint8 [] | [N]], [range]) -> y f32 [..., N]: DynamicQuantizeLinear(x), then
    MatMulInteger with B, then float(acc) * (x_scale * B_scale), as onnxruntime computes them
    (its DynamicQuantizeMatMul). `range`: a DynamicRange of x shared with other readers. Inputs
    from 5 on: operands of fused elementwise ops after the product (passes/epilogue_fusion.py)."""

    op_type = "DynamicQuantMatMul"
    domain = FUSED_DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x, b = ctx.input_shape(0), ctx.input_shape(1)
        if ctx.input_dtype(0).name != "float32":
            raise ctx.fail(f"x must be float32, got {ctx.input_dtype(0)}", 0)
        if ctx.input_dtype(1).name not in ("int8", "uint8") or len(b) != 2:
            raise ctx.fail(f"B must be an int8 / uint8 matrix [K, N], got {ctx.input_dtype(1)}{shape_str(b)}", 1)
        k, n = ctx.literals(b, "B's shape", 1)
        if not x or not ctx.same_dim(x[-1], k):
            raise ctx.fail(f"x's last dim must be K = {k}, got {shape_str(x)}", 0)
        if n % 4 or k > DQ_MAX_K:
            raise ctx.fail(f"B [{k}, {n}]: the kernel takes N a multiple of 4 and K <= {DQ_MAX_K}", 1)
        for i, what, kinds in ((2, "B_scale", ("float32",)), (3, "B_zero_point", ("int8", "uint8"))):
            if ctx.has_input(i) and (ctx.input_dtype(i).name not in kinds
                                     or numel(ctx.input_shape(i)) not in (1, n)):
                raise ctx.fail(f"{what} must be {' / '.join(kinds)} of 1 or N = {n} elements, got "
                               f"{ctx.input_dtype(i)}{shape_str(ctx.input_shape(i))}", i)
        if ctx.has_input(3) and ctx.input_dtype(3) != ctx.input_dtype(1):
            raise ctx.fail(f"B_zero_point's dtype {ctx.input_dtype(3)} differs from B's {ctx.input_dtype(1)}", 3)
        return [(dtypes.FLOAT32, tuple(x[:-1]) + (n,))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        k, n = (int(d) for d in ctx.input_shape(1))
        m = numel(ctx.input_shape(0)[:-1])
        if isinstance(m, int) and m == 0:
            return []
        reads: dict[str, object] = {"x": ctx.input(0), "b": ctx.input(1), "bs": ctx.input(2)}
        defs: dict[str, object] = {"SIGNED_B": ctx.input_dtype(1).name == "int8",
                                   "BS_COLS": numel(ctx.input_shape(2)) == n and n > 1}
        if ctx.has_input(3):
            reads["bz"] = ctx.input(3)
            defs.update(HAS_BZ=True, BZ_COLS=numel(ctx.input_shape(3)) == n and n > 1)
        params = {"M": m, "K": k, "N": n}
        epilogue_defs, epilogue_reads = quantized_epilogue(ctx)
        defs.update(epilogue_defs)
        reads.update(epilogue_reads)  # type: ignore[arg-type]

        def product(wg: int, words: int, rows: int, staged: bool, ranges: str | None) -> Step:
            extra = {"range": ranges} if ranges else {}
            groups = {"GROUPS": range_groups(m * k)} if ranges else {}
            return ctx.dispatch(
                "quantized/dynamic_quant_matmul.wgsl", label="dynamic_quant_matmul",
                defs={**defs, "WG": wg, "WORDS": words, "ROWS": rows, "STAGED": staged, "RANGE_IN": bool(ranges)},
                params={**params, **groups}, reads={**reads, **extra}, writes={"y": ctx.output(0)},
                workgroups=(ceil_div(n, 4 * wg * words), 1, ceil_div(m, rows)))

        def variants(key: str, rows: int, ranges: str | None) -> list[Step]:
            # CPU-type adapters: 8 threads of 2 words each, quantizing in registers (no barriers
            # in the K loop); GPU-type: 64 threads of one word, a shared tile of quantized x.
            return ctx.select(key, [("register", [product(8, 2, rows, False, ranges)], ALWAYS, adapter("cpu")),
                                    ("workgroup", [product(64, 1, rows, True, ranges)], ALWAYS, ALWAYS)],
                              tuned=True, shape=(m, n, k))
        dims = f"{k}x{n}"
        one_row = variants(f"dynamic_quant_matmul/row/{dims}", 1, None)
        # More than one row: x's range by DynamicRange (shared: input 4, or this node's own
        # dispatch), then 4 rows a workgroup. Not tuned against one_row: DynamicRange runs only
        # when m >= 2, so the choice between them follows m alone.
        if ctx.has_input(4):
            ranged = variants(f"dynamic_quant_matmul/rows/{dims}", 4, ctx.input(4))
        else:
            ranges = ctx.scratch(range_groups(m * k) * 2, "float32", "range")
            ranged = [_range(ctx, m * k, ranges), *variants(f"dynamic_quant_matmul/rows/{dims}", 4, ranges)]
        return ctx.select("dynamic_quant_matmul", [("one-row", one_row, at_most(m, 1), ALWAYS),
                                                   ("rows", ranged, ALWAYS, ALWAYS)])


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(DynamicRange(), 1), (DynamicQuantMatMul(), 1)]


__all__ = ["DQ_MAX_K", "DynamicQuantMatMul", "DynamicRange", "operators"]
