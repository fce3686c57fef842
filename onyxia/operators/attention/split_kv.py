"""Split-KV for the fused attention kernels (GroupQueryAttention, ONNX Attention).

A fused attention workgroup walks its query row's keys 64 at a time; per chunk each thread
computes one q.k (the head size, or its vec4s, in iterations) and folds the chunk into its value
columns (64 per column it owns). Over 20,000 keys with head size 128 that passed the ~65,535
loop iterations lavapipe lets one invocation run. With more keys than KPS a row's keys are split
into SPLITS workgroups (grid z = batch x SPLITS, shaders/attention/split.wgsl), each storing its
unnormalized softmax state, and shaders/attention/combine.wgsl merges them. That also gives a
decode step (one query row per head) several workgroups per head.

A symbolic key count (a growing KV cache) is usually one split: then the kernel writes the
output itself and a Select leaves the combine step out.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.ir.shapes import Dim
from onyxia.operators.base import MAX_TRIPS, WORKGROUP_SIZE, PlanCtx
from onyxia.operators.reduction.reduction import bound_of
from onyxia.plan import ALWAYS, Step, at_least

ATTENTION_WG = 64  # threads of a fused attention workgroup (attention::reduce WG)
CPU_ATTENTION_WG = 8  # the same on a CPU-type adapter: one SIMD batch of lavapipe's lanes
# Loop iterations one attention invocation may spend on its split of the keys.
SPLIT_TRIPS = 4 * MAX_TRIPS


@dataclass(frozen=True)
class KvSplit:
    """How a fused attention dispatch splits its keys: KPS keys per split, SPLITS splits."""

    kps: int
    splits: Dim
    cols: Dim  # scalar value columns of a row
    partial: str  # the scratch of partial states

    def defs(self) -> dict[str, object]:
        return {"SPLIT_KV": True, "KPS": self.kps}

    def params(self) -> dict[str, object]:
        return {"SPLITS": (self.splits, "u32"), "COLS": self.cols}


def split_keys(ctx: PlanCtx, max_keys: Dim, rows: Dim, cols: Dim, dot_trips: int, dpt: int | dict[int, int]
               ) -> KvSplit | None:
    """The split of a fused attention whose rows visit at most `max_keys` keys, None when one
    workgroup per row stays within SPLIT_TRIPS. `dot_trips`: iterations of one q.k; `dpt`:
    value columns per thread, or {threads per workgroup: its columns per thread} for a kernel
    planned at several workgroup sizes (one split serves them all: the smallest bound wins);
    `rows`: query rows (batch x heads x sequence)."""
    lanes = dpt if isinstance(dpt, dict) else {ATTENTION_WG: dpt}
    # Per lane count: chunks of `wg` keys, each dot_trips + dpt * wg iterations (+ the chunk's
    # max and the loop itself); a multiple of every lane count keeps each split's chunks whole.
    kps = min(wg * max(1, SPLIT_TRIPS // (dot_trips + d * wg + 16)) for wg, d in lanes.items())
    step = max(lanes)
    return split_by(ctx, max_keys, rows, cols, max(step, kps // step * step))


def split_by(ctx: PlanCtx, max_keys: Dim, rows: Dim, cols: Dim, kps: int) -> KvSplit | None:
    """Splits of `kps` keys over rows visiting at most `max_keys` keys (None: one is enough)."""
    if bound_of(max_keys) <= kps:
        return None
    splits = (max_keys + kps - 1) // kps
    partial = ctx.scratch(rows * splits * (cols + 2), "float32", "attention_splits")
    return KvSplit(kps, splits, cols, partial)


def combine_splits(ctx: PlanCtx, split: KvSplit, y: str, batch: Dim, heads: Dim, seq: Dim,
                   y_strides: tuple[Dim, Dim, Dim]) -> list[Step]:
    """The dispatch merging the splits' partial states into y, where there are two or more (with
    one the kernel wrote y itself)."""
    count = batch * heads * seq * split.cols
    params = {"N": count, "H": heads, "S": seq, "COLS": split.cols, "SPLITS": (split.splits, "u32"),
              "YB": y_strides[0], "YH": y_strides[1], "YS": y_strides[2]}
    combine = ctx.dispatch("attention/combine.wgsl", label="attention_combine", params=params,
                           reads={"partial": split.partial}, writes={"y": y},
                           workgroups=ctx.grid(count, WORKGROUP_SIZE))
    return ctx.select("attention_combine", [("splits", [combine], at_least(split.splits, 2), ALWAYS),
                                            ("one split", [], ALWAYS, ALWAYS)])


__all__ = ["ATTENTION_WG", "CPU_ATTENTION_WG", "KvSplit", "combine_splits", "split_by", "split_keys"]
