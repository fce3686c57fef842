"""Control flow: If, Loop and Scan, whose subgraphs are IrGraphs that read the enclosing graph.

How each runs (the cost of each choice is in the README):
- If with a condition known at compile time (a constant, or folded from shapes) is its taken
  branch: only that branch is inferred and planned, its results copied to the If's outputs; the
  other branch is never compiled. Otherwise a BranchStep reads the condition back (one GPU sync;
  none for a graph input, fed on the host) and replays one arm. The arms must agree on dtypes
  and ranks; an output dim they give differently (a merged decoder's present KV: past + new
  tokens with a cache, new tokens without) is a data symbol the runtime sets after the arm ran.
- Loop and Scan are LoopSteps: the runtime encodes the body once per iteration on the host,
  with per-iteration copies (loop-carried values, scan slices at offsets that move with the
  iteration) and the iteration number copied from an index table. A trip count that is a
  constant or an expression over the dims costs no sync at all (Scan, a Loop with M known and a
  condition that folds to true); a fed or computed M is read back once (ReadSymbol), a condition
  computed in the body once per iteration. Loop scan outputs are sized by the iterations run.

Loop-carried values keep their shape across iterations here, since each is one buffer. A Loop
whose carried value changes shape per iteration (a tensor grown by a Concat) raises
CarriedShapeError, and SequenceLoweringPass unrolls it when its trip count and condition are
known at compile time (InferenceSession specializes on a fed trip count); a Scan state must keep
its shape.
"""

from __future__ import annotations

import numpy as np

from onyxia.errors import CarriedShapeError
from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import Dim, Shape, dim_symbols, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides
from onyxia.operators.indexing.indexing import plan_strided_copy
from onyxia.plan import BranchStep, CopyBuffer, LoopStep, ReadSymbol, SliceCopy, Step

# A Loop without a trip count runs until its condition turns false (the runtime bounds it).
UNBOUNDED_TRIPS = 2**31 - 1


def nbytes(dtype: DType, shape: Shape) -> Dim:
    """Device bytes of a whole tensor (padded to a word: both ends of a copy are)."""
    return dtype.nbytes(numel(shape))


def slice_bytes(ctx: InferenceCtx, dtype: DType, shape: Shape, what: str) -> Dim:
    """Device bytes of one slice copied at offsets that move with the iteration: whole words."""
    if not dtype.packed:
        return numel(shape) * 4
    n = numel(shape)
    if not isinstance(n, int) or n % dtype.per_word:
        raise ctx.fail(f"{what}: slices of {n} {dtype} elements are not whole 32-bit words, which loop "
                       f"copies move (a multiple of {dtype.per_word} elements is)")
    return n // dtype.per_word * 4


def _root(ctx: PlanCtx, name: str) -> str:
    while name in ctx.state.aliases:
        name = ctx.state.aliases[name]
    return name


def copy_into(ctx: PlanCtx, src: str, dst: str, shape: Shape) -> list[Step]:
    """A whole-tensor copy, none when both names share a buffer (a view) or it is empty."""
    if _root(ctx, src) == _root(ctx, dst):
        return []
    return [CopyBuffer(src, dst, nbytes(ctx.tensor_dtype(src), shape))]


def carried_copies(ctx: PlanCtx, outs: list[str], ins: list[str], types: list[tuple[DType, Shape]]) -> list[SliceCopy]:
    """The copies that hand each iteration's results to the next one's inputs (out k -> in k).

    A result that is itself a view of a body input (a swap: a' = b, b' = a; a state passed on
    unchanged) is staged through a scratch buffer first, so no copy reads an input another copy
    already overwrote. Scan-output copies must come before these."""
    input_roots = {_root(ctx, t) for t in ins}
    staged: list[SliceCopy] = []
    direct: list[SliceCopy] = []
    final: list[SliceCopy] = []
    for k, (src, dst, (dtype, shape)) in enumerate(zip(outs, ins, types)):
        root = _root(ctx, src)
        if root == _root(ctx, dst):
            continue
        size = nbytes(dtype, shape)
        if root in input_roots:
            tmp = ctx.scratch(numel(shape), dtype.name, f"carried_{k}")
            staged.append(SliceCopy(src, tmp, size))
            final.append(SliceCopy(tmp, dst, size))
        else:
            direct.append(SliceCopy(src, dst, size))
    return [*staged, *direct, *final]


def _known_bool(ctx: InferenceCtx, i: int) -> bool | None:
    value = ctx.input_value(i) if ctx.has_input(i) else None
    if value is None or value.dtype == object or np.asarray(value).size != 1:
        return None
    return bool(np.asarray(value).reshape(-1)[0])


def _graph(ctx: InferenceCtx, attr: str) -> IrGraph:
    graph = ctx.attr(attr)
    if not isinstance(graph, IrGraph):
        raise ctx.fail(f"attribute '{attr}' must be a graph")
    return graph


# ---- If ---------------------------------------------------------------------------------------

class If(Operator):
    op_type = "If"

    def _arm_types(self, ctx: InferenceCtx, arm: str) -> list[tuple[DType, Shape]]:
        types = ctx.infer_subgraph(arm)
        if len(types) != len(ctx.node.outputs):
            raise ctx.fail(f"attribute '{arm}' has {len(types)} outputs, the node {len(ctx.node.outputs)}")
        return types

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if not ctx.same_dim(numel(ctx.input_shape(0)), 1) or not ctx.input_dtype(0).is_bool:
            raise ctx.fail(f"cond must be one bool, got {ctx.input_dtype(0)}{list(ctx.input_shape(0))}", 0)
        cond = _known_bool(ctx, 0)
        if cond is not None:
            return self._arm_types(ctx, "then_branch" if cond else "else_branch")
        then, orelse = self._arm_types(ctx, "then_branch"), self._arm_types(ctx, "else_branch")
        results = []
        for i, ((ta, sa), (tb, sb)) in enumerate(zip(then, orelse)):
            if ta != tb or len(sa) != len(sb):
                raise ctx.fail(f"output {i}: then_branch gives {ta}{list(sa)}, else_branch {tb}{list(sb)}; "
                               "with a condition known only at run time both need one dtype and rank")
            results.append((ta, tuple(a if a == b else self._dim_symbol(ctx, i, axis, a, b)
                                      for axis, (a, b) in enumerate(zip(sa, sb)))))
        return results

    @staticmethod
    def _dim_symbol(ctx: InferenceCtx, i: int, axis: int, a: Dim, b: Dim) -> Dim:
        """A data symbol for an output dim the arms give differently (set when one has run).

        Compared as expressions, not values: two dims equal at these dims only (a past length
        of 0) may differ at the next. Buffers take a + b (at least either; dims are never
        negative): the arm writes its result before the runtime sets the symbol."""
        unbounded = sorted(s for s in dim_symbols(a) | dim_symbols(b) if ctx.env.data_symbols.get(s, 0) is None)
        if unbounded:
            raise ctx.fail(f"output {i} axis {axis}: then_branch gives {a}, else_branch {b}, and the count "
                           f"'{unbounded[0]}' has no upper bound to size the output by")
        bound = max(a, b) if isinstance(a, int) and isinstance(b, int) else a + b
        return ctx.env.data_symbol(f"{ctx.node.name}_out{i}_{axis}", bound)

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        cond = _known_bool(ctx, 0)
        if cond is None:
            return None
        arm = _graph(ctx, "then_branch" if cond else "else_branch")
        return [arm.tensor(t).value for t in arm.outputs]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        cond = _known_bool(ctx, 0)
        arms, sets = {}, {}
        for arm in ("then_branch", "else_branch") if cond is None else ("then_branch" if cond else "else_branch",):
            graph = _graph(ctx, arm)
            # The arm's nodes are named "<If>/<arm>/<node>" (onnx.py): errors and kernel reports
            # from inside it name the branch and the node.
            steps = ctx.plan_subgraph(arm)
            sets[arm] = []
            for i, src in enumerate(graph.outputs):
                shape = graph.tensor(src).shape
                steps += copy_into(ctx, src, ctx.output(i), shape)  # the arm's size: before the symbols
                sets[arm] += [(str(d), a) for d, a in zip(ctx.output_shape(i), shape) if d != a]
            arms[arm] = steps
        if cond is not None:  # the taken branch only: no readback, the other branch never compiled
            return next(iter(arms.values()))
        return [BranchStep(ctx.input(0), tuple(arms["then_branch"]), tuple(arms["else_branch"]),
                           tuple(sets["then_branch"]), tuple(sets["else_branch"]), ctx.node.name)]


# ---- Loop -------------------------------------------------------------------------------------

class Loop(Operator):
    """Body inputs (iteration, cond, carried...), outputs (cond, carried..., scan...)."""

    op_type = "Loop"

    def _counts(self, ctx: InferenceCtx) -> tuple[IrGraph, int, int]:
        body = _graph(ctx, "body")
        carried = len(ctx.node.inputs) - 2
        if carried < 0 or len(body.inputs) != 2 + carried:
            raise ctx.fail(f"attribute 'body' takes {len(body.inputs)} inputs; the node gives {max(carried, 0)} "
                           "loop-carried values (it needs 2 + that many)")
        scans = len(body.outputs) - 1 - carried
        if scans < 0 or len(ctx.node.outputs) != carried + scans:
            raise ctx.fail(f"attribute 'body' has {len(body.outputs)} outputs for {carried} loop-carried values; "
                           f"the node has {len(ctx.node.outputs)} outputs")
        return body, carried, scans

    def _trip(self, ctx: InferenceCtx) -> Dim | None:
        """The trip count when host-known (None: read back, or no M at all)."""
        if not ctx.has_input(0):
            return UNBOUNDED_TRIPS
        value = ctx.input_value(0)
        if value is None:
            return None
        raw = np.asarray(value).reshape(-1)[0]
        return raw if not isinstance(raw, (int, np.integer)) else min(max(int(raw), 0), UNBOUNDED_TRIPS)

    def _static_cond(self, ctx: InferenceCtx, body: IrGraph) -> bool:
        """Whether every iteration's condition is true without reading it back."""
        first = _known_bool(ctx, 1) if ctx.has_input(1) else True
        out = body.tensor(body.outputs[0]).value
        return first is True and out is not None and out.dtype != object and bool(np.asarray(out).reshape(-1)[0])

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        body, carried, scans = self._counts(ctx)
        for i, what in ((0, "M (the trip count)"), (1, "cond")):
            if ctx.has_input(i) and not ctx.same_dim(numel(ctx.input_shape(i)), 1):
                raise ctx.fail(f"{what} must hold one value, got shape {list(ctx.input_shape(i))}", i)
        # Inside the body the condition is always true: an iteration runs only while it is.
        body.tensors[body.inputs[1]].value = np.array(True)
        state = [(ctx.input_dtype(2 + k), ctx.input_shape(2 + k)) for k in range(carried)]
        types = ctx.infer_subgraph("body", [(dtypes.INT64, ()), (dtypes.BOOL, ()), *state])
        for k, ((ti, si), (to, so)) in enumerate(zip(state, types[1:1 + carried])):
            if ti != to or not ctx.same_shape(si, so):
                raise CarriedShapeError(
                    f"loop-carried value {k} enters as {ti}{shape_str(si)} and leaves the body as "
                    f"{to}{shape_str(so)}; onyxia keeps each in one buffer, or unrolls the Loop when its trip "
                    "count and condition are known at compile time", node=ctx.node.name, op_type=ctx.node.op_type)
        iterations = self._iterations(ctx, body)
        return [*types[1:1 + carried], *((t, (iterations, *s)) for t, s in types[1 + carried:])]

    def _iterations(self, ctx: InferenceCtx, body: IrGraph) -> Dim:
        trip = self._trip(ctx)
        if ctx.has_input(1) and _known_bool(ctx, 1) is False:
            return 0
        if trip is None:  # M read back before the loop
            trip = ctx.env.data_symbol(f"{ctx.node.name}_trips", None)
        if self._static_cond(ctx, body):
            return trip
        return ctx.env.data_symbol(f"{ctx.node.name}_iterations", None if trip == UNBOUNDED_TRIPS else trip)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        body, carried, scans = self._counts(ctx)
        steps: list[Step] = []
        trip = self._trip(ctx)
        if trip is None:
            trip = ctx.env.data_symbol(f"{ctx.node.name}_trips", None)
            steps.append(ReadSymbol(ctx.input(0), str(trip)))
        if ctx.has_input(1) and _known_bool(ctx, 1) is False:
            trip = 0
        static_cond = self._static_cond(ctx, body)
        iterations = None if static_cond else self._iterations(ctx, body)
        if scans and not static_cond and trip == UNBOUNDED_TRIPS:
            raise ctx.fail("scan outputs of a Loop whose condition is computed need a trip count M (they are "
                           "sized by it while the loop runs)")
        v_in, v_out = body.inputs[2:], body.outputs[1:1 + carried]
        for k in range(carried):
            steps += copy_into(ctx, ctx.input(2 + k), v_in[k], ctx.input_shape(2 + k))
        leave = []
        for j, src in enumerate(body.outputs[1 + carried:]):  # before the carried values change
            size = slice_bytes(ctx, ctx.output_dtype(carried + j), ctx.output_shape(carried + j)[1:],
                               f"scan output {j}")
            leave.append(SliceCopy(src, ctx.output(carried + j), size, dst_stride=size))
        leave += carried_copies(ctx, v_out, v_in, [(ctx.input_dtype(2 + k), ctx.input_shape(2 + k))
                                                   for k in range(carried)])
        first = ctx.input(1) if ctx.has_input(1) and _known_bool(ctx, 1) is None else None
        body_steps = ctx.plan_subgraph("body")
        steps.append(LoopStep(tuple(body_steps), trip, cond=None if static_cond else body.outputs[0],
                              first=first, counter=body.inputs[0], leave=tuple(leave),
                              iterations=None if iterations is None else str(iterations), label=ctx.node.name))
        for k in range(carried):
            steps += copy_into(ctx, v_in[k], ctx.output(k), ctx.output_shape(k))
        return steps


# ---- Scan -------------------------------------------------------------------------------------

def _axes(ctx: InferenceCtx, name: str, count: int, ranks: list[int]) -> list[int]:
    raw = list(ctx.attr(name, [0] * count))
    if len(raw) != count:
        raise ctx.fail(f"attribute '{name}' has {len(raw)} entries for {count} tensors")
    return [ctx.axis(int(a), r, f"attribute '{name}' entry {k}") for k, (a, r) in enumerate(zip(raw, ranks))]


def _flags(ctx: InferenceCtx, name: str, count: int) -> list[bool]:
    raw = list(ctx.attr(name, [0] * count))
    if len(raw) != count or any(int(v) not in (0, 1) for v in raw):
        raise ctx.fail(f"attribute '{name}' must hold {count} entries of 0 or 1, got {raw}")
    return [bool(v) for v in raw]


def permute_copy(ctx: PlanCtx, src: str, src_shape: Shape, perm: list[int], dst: str) -> list[Step]:
    """dst = src transposed by `perm` (one gather.wgsl dispatch): a scan axis moved to or from
    the front, so that each iteration's slice is one contiguous copy."""
    strides = contiguous_strides(src_shape)
    return plan_strided_copy(ctx, tuple(src_shape[p] for p in perm), [strides[p] for p in perm], x=src, y=dst)


class Scan(Operator):
    """Scan-9 and later: N state variables, then `num_scan_inputs` sequences scanned along their
    scan axes (forward or reverse); outputs the final states, then the stacked scan outputs."""

    op_type = "Scan"

    def _layout(self, ctx: InferenceCtx) -> tuple[IrGraph, int, int, int]:
        body = _graph(ctx, "body")
        m = int(ctx.attr("num_scan_inputs"))
        n = len(ctx.node.inputs) - m
        k = len(ctx.node.outputs) - n
        if m < 1 or n < 0 or k < 0 or len(body.inputs) != n + m or len(body.outputs) != n + k:
            raise ctx.fail(f"attribute 'body' ({len(body.inputs)} inputs, {len(body.outputs)} outputs) does not fit "
                           f"{n} states and num_scan_inputs={m} with {len(ctx.node.outputs)} outputs")
        return body, n, m, k

    def _sequences(self, ctx: InferenceCtx) -> tuple[list[int], list[bool], Dim]:
        body, n, m, _ = self._layout(ctx)
        shapes = [ctx.input_shape(n + j) for j in range(m)]
        axes = _axes(ctx, "scan_input_axes", m, [len(s) for s in shapes])
        reverse = _flags(ctx, "scan_input_directions", m)
        length = shapes[0][axes[0]]
        for j in range(1, m):
            if not ctx.same_dim(shapes[j][axes[j]], length):
                raise ctx.fail(f"scan input {j} has {shapes[j][axes[j]]} steps along its axis, input 0 has {length}",
                               n + j)
        return axes, reverse, length

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        body, n, m, k = self._layout(ctx)
        axes, _, length = self._sequences(ctx)
        state = [(ctx.input_dtype(i), ctx.input_shape(i)) for i in range(n)]
        slices = [(ctx.input_dtype(n + j), tuple(d for a, d in enumerate(ctx.input_shape(n + j)) if a != axes[j]))
                  for j in range(m)]
        types = ctx.infer_subgraph("body", [*state, *slices])
        for i, ((ti, si), (to, so)) in enumerate(zip(state, types[:n])):
            if ti != to or not ctx.same_shape(si, so):
                raise ctx.fail(f"state {i} enters as {ti}{shape_str(si)} and leaves the body as "
                               f"{to}{shape_str(so)}; onyxia keeps each state in one buffer, so it must keep its "
                               "type and shape (a Loop with a constant trip count may grow its carried values: it is "
                               "unrolled)")
        out_axes = _axes(ctx, "scan_output_axes", k, [len(s) + 1 for _, s in types[n:]])
        _flags(ctx, "scan_output_directions", k)
        stacked = [(t, (*s[:a], length, *s[a:])) for (t, s), a in zip(types[n:], out_axes)]
        return [*types[:n], *stacked]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        body, n, m, k = self._layout(ctx)
        axes, reverse, length = self._sequences(ctx)
        out_shapes = [ctx.output_shape(n + j) for j in range(k)]
        out_axes = _axes(ctx, "scan_output_axes", k, [len(s) for s in out_shapes])
        out_reverse = _flags(ctx, "scan_output_directions", k)
        steps: list[Step] = []
        for i in range(n):
            steps += copy_into(ctx, ctx.input(i), body.inputs[i], ctx.input_shape(i))
        enter: list[SliceCopy] = []
        for j in range(m):
            shape, axis, src = ctx.input_shape(n + j), axes[j], ctx.input(n + j)
            if axis != 0:  # make each step's slice contiguous: the scan axis first
                perm = [axis, *(a for a in range(len(shape)) if a != axis)]
                src = ctx.scratch(numel(shape), ctx.input_dtype(n + j).name, f"scan_input_{j}")
                steps += permute_copy(ctx, ctx.input(n + j), shape, perm, src)
            size = slice_bytes(ctx, ctx.input_dtype(n + j), tuple(d for a, d in enumerate(shape) if a != axis),
                               f"scan input {j}")
            enter.append(SliceCopy(src, body.inputs[n + j], size, (length - 1) * size if reverse[j] else 0,
                                   -size if reverse[j] else size))
        leave: list[SliceCopy] = []
        after: list[Step] = []
        for j in range(k):
            shape, axis = out_shapes[j], out_axes[j]
            per_step = tuple(d for a, d in enumerate(shape) if a != axis)
            size = slice_bytes(ctx, ctx.output_dtype(n + j), per_step, f"scan output {j}")
            dst = ctx.output(n + j)
            if axis != 0:
                dst = ctx.scratch(numel(shape), ctx.output_dtype(n + j).name, f"scan_output_{j}")
                perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, len(shape)))
                after += permute_copy(ctx, dst, (length, *per_step), perm, ctx.output(n + j))
            leave.append(SliceCopy(body.outputs[n + j], dst, size,
                                   dst_offset=(length - 1) * size if out_reverse[j] else 0,
                                   dst_stride=-size if out_reverse[j] else size))
        leave += carried_copies(ctx, body.outputs[:n], body.inputs[:n],
                                [(ctx.input_dtype(i), ctx.input_shape(i)) for i in range(n)])
        steps.append(LoopStep(tuple(ctx.plan_subgraph("body")), length, enter=tuple(enter), leave=tuple(leave),
                              label=ctx.node.name))
        for i in range(n):
            steps += copy_into(ctx, body.inputs[i], ctx.output(i), ctx.output_shape(i))
        return steps + after


class Scan8(Operator):
    """Scan-8: a leading batch axis on the states and scan inputs ([B, T, ...], scanned along
    axis 1, `directions` per scan input) and optional sequence_lens first (every sequence must
    run its full length T). Planned as a LoopStep over the batch holding one over the steps."""

    op_type = "Scan"

    def _layout(self, ctx: InferenceCtx) -> tuple[IrGraph, int, int, int]:
        body = _graph(ctx, "body")
        m = int(ctx.attr("num_scan_inputs"))
        n = len(ctx.node.inputs) - 1 - m
        k = len(ctx.node.outputs) - n
        if m < 1 or n < 0 or k < 0 or len(body.inputs) != n + m or len(body.outputs) != n + k:
            raise ctx.fail(f"attribute 'body' ({len(body.inputs)} inputs, {len(body.outputs)} outputs) does not fit "
                           f"{n} states and num_scan_inputs={m} with {len(ctx.node.outputs)} outputs")
        if ctx.has_input(0):
            lens = ctx.input_value(0)
            length = ctx.input_shape(1 + n)[1]
            if lens is None or not isinstance(length, int) or np.any(np.asarray(lens) != length):
                raise ctx.fail("sequence_lens shorter than the scan inputs are not supported (every sequence must "
                               "run its full length)", 0)
        return body, n, m, k

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        body, n, m, k = self._layout(ctx)
        batch, length = ctx.input_shape(1 + n)[0], ctx.input_shape(1 + n)[1]
        state = [(ctx.input_dtype(1 + i), ctx.input_shape(1 + i)[1:]) for i in range(n)]
        slices = [(ctx.input_dtype(1 + n + j), ctx.input_shape(1 + n + j)[2:]) for j in range(m)]
        types = ctx.infer_subgraph("body", [*state, *slices])
        return [*((t, (batch, *s)) for t, s in types[:n]), *((t, (batch, length, *s)) for t, s in types[n:])]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        body, n, m, k = self._layout(ctx)
        batch, length = ctx.input_shape(1 + n)[0], ctx.input_shape(1 + n)[1]
        reverse = _flags(ctx, "directions", m)
        outer_enter, outer_leave, enter, leave = [], [], [], []
        for i in range(n):
            size = slice_bytes(ctx, ctx.input_dtype(1 + i), ctx.input_shape(1 + i)[1:], f"state {i}")
            outer_enter.append(SliceCopy(ctx.input(1 + i), body.inputs[i], size, 0, size))
            outer_leave.append(SliceCopy(body.inputs[i], ctx.output(i), size, 0, 0, 0, size))
        for j in range(m):
            shape = ctx.input_shape(1 + n + j)
            dtype = ctx.input_dtype(1 + n + j)
            per_batch = ctx.scratch(numel(shape[1:]), dtype.name, f"scan_input_{j}")
            batch_size = slice_bytes(ctx, dtype, shape[1:], f"scan input {j}")
            outer_enter.append(SliceCopy(ctx.input(1 + n + j), per_batch, batch_size, 0, batch_size))
            size = slice_bytes(ctx, dtype, shape[2:], f"scan input {j}")
            enter.append(SliceCopy(per_batch, body.inputs[n + j], size, (length - 1) * size if reverse[j] else 0,
                                   -size if reverse[j] else size))
        for j in range(k):
            shape = ctx.output_shape(n + j)
            dtype = ctx.output_dtype(n + j)
            per_batch = ctx.scratch(numel(shape[1:]), dtype.name, f"scan_output_{j}")
            step_size = slice_bytes(ctx, dtype, shape[2:], f"scan output {j}")
            batch_size = slice_bytes(ctx, dtype, shape[1:], f"scan output {j}")
            leave.append(SliceCopy(body.outputs[n + j], per_batch, step_size, dst_stride=step_size))
            outer_leave.append(SliceCopy(per_batch, ctx.output(n + j), batch_size, dst_stride=batch_size))
        leave += carried_copies(ctx, body.outputs[:n], body.inputs[:n],
                                [(ctx.input_dtype(1 + i), ctx.input_shape(1 + i)[1:]) for i in range(n)])
        inner = LoopStep(tuple(ctx.plan_subgraph("body")), length, enter=tuple(enter), leave=tuple(leave),
                         label=ctx.node.name)
        return [LoopStep((inner,), batch, enter=tuple(outer_enter), leave=tuple(outer_leave), label=ctx.node.name)]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(If(), 1), (Loop(), 1), (Scan8(), 8), (Scan(), 9)]
