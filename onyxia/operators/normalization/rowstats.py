"""Planning rownorm.wgsl and moments.wgsl: a row's two statistics, then its writes.

`plan_rows` binds a LayerNorm-family row by role (READ_ROLES, WRITE_ROLES); `in_parts` splits a
row longer than one invocation may loop over (lavapipe's loop cap) into parts whose statistics
are merged, so per-invocation trip counts stay bounded by construction.
"""

from __future__ import annotations

from typing import Callable

from onyxia.ir.dtypes import FLOAT32
from onyxia.ir.shapes import Dim
from onyxia.operators.base import MAX_TRIPS, WORKGROUP_SIZE, Buf, PlanCtx
from onyxia.operators.reduction.reduction import bound_of, lanes_for
from onyxia.plan import ALWAYS, Step, adapter, at_least

READ_ROLES = ("skip", "bias", "scale", "beta")  # binding order after x
# The CPU-adapter variant: rows of at least CPU_ROW_MIN elements (static) take a workgroup of
# CPU_LANES threads each; shorter ones a thread each in 256-thread workgroups (one workgroup per
# short row would multiply lavapipe's per-workgroup cost; lanes sharing one, its barriers).
CPU_LANES = 8
CPU_ROW_MIN = 64
ORT_RMS_LANES = 8  # onnxruntime's RMS norm keeps eight running sums (an AVX2 register)
WRITE_ROLES = ("y", "mean_out", "inv_out", "sum_out")


def plan_rows(ctx: PlanCtx, out: str, rows: Dim, k: Dim, *, inner: Dim = 1, eps: float = 0.0,
              reads: dict[str, int] | None = None, writes: dict[str, int] | None = None,
              counts: dict[str, Dim] | None = None, x: str | None = None, y: str | None = None,
              x_scale: float | None = None, long_rows: bool = False) -> list[Step]:
    """rownorm.wgsl over `rows` rows of `k` elements (in parts when long: in_parts).
    `reads`/`writes` map roles to this node's input/output indices; `counts` gives the element
    count of operands indexed modulo their size. `x` / `y`: other tensors than the node's input 0
    and the output of role y (an operator's scratch buffers: FusedAttention's scores; the same
    tensor for both normalizes in place, X_IN_Y: the pass writing y binds it once); `x_scale`:
    normalize x_scale * x (the scores' scale, FusedAttention); `long_rows`: a symbolic k its caller
    knows to be at least CPU_ROW_MIN wherever this runs (a CPU-type adapter then takes a row per
    workgroup of CPU_LANES, as for a static row that long)."""
    if isinstance(rows, int) and rows == 0:
        return []
    reads, writes = reads or {}, writes or {"y": 0}
    for i in (0, *reads.values()):
        ctx.compute_type(ctx.input_dtype(i), f"input {i}")
        if not ctx.input_dtype(i).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(i)}", i)
    lanes = lanes_for(rows, k, True)
    strided = not (isinstance(inner, int) and inner == 1)
    defs: dict[str, object] = {"LANES": lanes, "RED_INNER": 1, "OUT": out,
                               "STATS": "online" if "softmax" in out else "moments", "STRIDED": strided}
    # An RMS norm without skip sums its squares as onnxruntime does (8 running fused
    # multiply-adds, see rownorm.wgsl) where eight lanes walk the row in one part.
    if (out == "rmsnorm" and "skip" not in (reads or {}) and lanes >= ORT_RMS_LANES
            and bound_of(k) <= ORT_RMS_LANES * MAX_TRIPS):
        defs["ORT_RMS"] = True
    params: dict[str, object] = {"ROWS": rows, "K": k}
    if x_scale is not None:
        defs["X_SCALE"], params["X_SCALE"] = True, float(x_scale)
    if strided:
        params["INNER"] = inner
    if out in ("layernorm", "rmsnorm"):
        params["EPS"] = float(eps)
    read_names, write_names = {"x": x or ctx.input(0)}, {}
    in_place = y is not None and read_names["x"] == y
    if in_place and (reads or set(writes) != {"y"} or strided):
        raise ctx.fail("an in-place row normalization reads x alone and writes y alone")
    for role in READ_ROLES:
        if role in reads:
            defs[role.upper()] = True
            read_names[role] = ctx.input(reads[role])
    for role in WRITE_ROLES:
        if role in writes:
            defs[role.upper()] = True
            write_names[role] = y if role == "y" and y else ctx.output(writes[role])
    params.update({f"{role.upper()}_N": n for role, n in (counts or {}).items()})
    output_only = ("SCALE", "BETA", "MEAN_OUT", "INV_OUT", "SUM_OUT", "SCALE_N", "BETA_N")

    # Rows of whole quads in one part read x and write y as vec4s (QUADS in rownorm.wgsl).
    quad_types = (ctx.tensor_dtype(read_names["x"]) == FLOAT32 and "y" in write_names
                  and ctx.tensor_dtype(write_names["y"]) == FLOAT32)

    def variant(lanes: int, group: int) -> list[Step]:
        vdefs = {**defs, **lane_defs(lanes, group)}
        vreads: dict[str, str | Buf] = dict(read_names)
        vwrites: dict[str, str | Buf] = dict(write_names)
        if (quad_types and isinstance(k, int) and k % 4 == 0 and k <= lanes * MAX_TRIPS and not strided
                and "ORT_RMS" not in defs):
            vdefs["QUADS"] = True
            vreads["x"], vwrites["y"] = Buf(read_names["x"], vector=True), Buf(write_names["y"], vector=True)
        stats = ({d: v for d, v in vdefs.items() if d not in output_only},
                 {p: v for p, v in params.items() if p not in output_only},
                 {n: t for n, t in vreads.items() if n in ("x", "skip", "bias")})
        if in_place:  # one dispatch may not bind a buffer read-only and read-write: y serves x
            vdefs["X_IN_Y"] = True
            vreads = {n: t for n, t in vreads.items() if n != "x"}
        return in_parts(ctx, "normalization/rownorm.wgsl", f"rownorm_{out}", rows, k, lanes, vdefs, params,
                        vreads, vwrites, stats, group=group)

    if (not isinstance(k, int) and not long_rows) or (isinstance(k, int) and k < CPU_ROW_MIN and "ORT_RMS" in defs):
        return variant(lanes, WORKGROUP_SIZE)  # (ORT_RMS sums over 8 lanes)
    # A CPU-type adapter (lavapipe) runs a workgroup as SIMD batches of 8 threads and switches
    # between the batches at every barrier: a row per workgroup of one batch has no switches
    # (decode RMSNorm over 512 elements: ~66 -> ~15 us), a short row a thread and no barrier at
    # all (ConvNeXt's channel LayerNorms, 3136 rows of 40: ~10.8 ms with 64 lanes a row). GPUs
    # keep the 256-thread rows.
    cpu = (1, WORKGROUP_SIZE) if isinstance(k, int) and k < CPU_ROW_MIN else (CPU_LANES, CPU_LANES)
    return by_adapter(ctx, f"rownorm_{out}", variant, cpu, lanes)


def lane_defs(lanes: int, group: int) -> dict[str, object]:
    """The LANES def, and WG_SIZE where the workgroup is not the default size."""
    return {"LANES": lanes, **({"WG_SIZE": group} if group != WORKGROUP_SIZE else {})}


def by_adapter(ctx: PlanCtx, key: str, variant: Callable[[int, int], list[Step]], cpu: tuple[int, int],
               lanes: int) -> list[Step]:
    """A Select of a row kernel's variant(lanes, group) for each adapter kind: `cpu` (lanes,
    group) where the adapter is a CPU, `lanes` in default workgroups elsewhere."""
    return ctx.select(key, [("cpu", variant(*cpu), ALWAYS, adapter("cpu")),
                            ("gpu", variant(lanes, WORKGROUP_SIZE), ALWAYS, ALWAYS)])


def in_parts(ctx: PlanCtx, shader: str, label: str, rows: Dim, k: Dim, lanes: int, defs: dict[str, object],
             params: dict[str, object], reads: dict[str, str], writes: dict[str, str],
             stats: tuple[dict[str, object], dict[str, object], dict[str, str]], *,
             group: int = WORKGROUP_SIZE) -> list[Step]:
    """A statistics normalization (rownorm.wgsl, moments.wgsl) over `rows` rows of `k`: one
    dispatch, or for rows an invocation may not loop over (longer than LANES x MAX_TRIPS, or
    symbolic) two: the parts' statistics (`stats`: that pass's defs, params and reads), then
    each part merging them and writing its elements. A symbolic row of one part skips the
    first (a Select) and walks its row in the second. `group`: threads per workgroup (the
    WG_SIZE def when not the default)."""
    chunk = lanes * MAX_TRIPS
    if bound_of(k) <= chunk:
        return [ctx.dispatch(shader, label=label, defs=defs, params=params, reads=reads, writes=writes,
                             workgroups=ctx.grid(rows, group // lanes))]
    # At most 2^32 / CHUNK parts: a few per lane when merged.
    parts = (k + chunk - 1) // chunk
    partial = ctx.scratch(rows * parts * 2, "float32", "row_stats")
    split = {"PARTS": (parts, "u32")}
    stat_defs, stat_params, stat_reads = stats
    first = ctx.dispatch(shader, label=label, defs={**stat_defs, "CHUNK": chunk, "PARTIALS_OUT": True},
                         params={**stat_params, **split}, reads=stat_reads, writes={"partial": partial},
                         workgroups=ctx.grid(rows * parts, group // lanes))
    return [*ctx.select(f"{label}/parts", [("parts", [first], at_least(parts, 2), ALWAYS),
                                           ("one part", [], ALWAYS, ALWAYS)]),
            ctx.dispatch(shader, label=label, defs={**defs, "CHUNK": chunk, "PARTIALS_IN": True},
                         params={**params, **split}, reads={**reads, "partial": partial}, writes=writes,
                         workgroups=ctx.grid(rows * parts, group // lanes))]
