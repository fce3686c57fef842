// Reduction over a strided walk: y[o] = FINAL(COMBINE over r < K of MAP(x[base_of(o) + offset_of(r)])).
// LANES threads share each output (reduction::lanes) and meet in reduction::tree; a workgroup
// of 256 threads serves 256 / LANES outputs.
// Buffers: src, dst. Defs: A (accumulator type), LANES, RED_INNER (1: the
// lanes of one output are adjacent threads, the walk is contiguous; 0: adjacent threads take
// adjacent outputs), BASE / OFFSET (generated functions base_of(o) and offset_of(r)), INIT.
// Value mode: MAP (over x: A and the shift m: A), COMBINE (over a, b), FINAL (over acc: A and
// n: u32), SHIFT (first find the max m of the walk; LOWEST is A's lowest value).
// ARG mode (ArgMax/ArgMin): CMP (">" or "<"), LAST (1: ties take the last index), FLOAT (1: NaN
// wins, as it does in the max and the min); writes i32.
// Params: M (outputs), K (elements per output) and the dims/strides BASE and OFFSET read.
//
// A walk longer than one invocation may loop (lavapipe stops an invocation's loops after ~65,535
// iterations) is split into parts of CHUNK elements (def; LANES x a bounded trip count), each
// reduced by its own lanes into a partial: with def CHUNK, row v of the grid is part c of output
// o (RED_INNER 1: v = o * PARTS + c, so an output's partials are adjacent; 0: v = c * M + o) and
// dst[v] is the partial (FINAL sees the part's `n`); a second dispatch reduces the partials.
// There, def TOTAL makes FINAL's `n` the param TOTAL (the whole walk's length). ARG mode with
// CHUNK also writes the winner's value to `vals` (dst gets its index in the whole walk); with IDX
// it reads candidates' indices from `idx` (a previous pass's winners) instead of their position.
#import reduction::tree

const NONE: u32 = 0xffffffffu;

#{BASE}

#{OFFSET}

fn load(base: u32, r: u32) -> #{A} {
    return #{A}(src_load(base + offset_of(r)));
}

// By its bits: a NaN test the compiler may not fold away (called for f32 values only).
fn is_nan(v: #{A}) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

#ifndef ARG
alias LaneValue = #{A};

fn combine(a: #{A}, b: #{A}) -> #{A} {
    return #{COMBINE};
}

#ifdef SHIFT
// With SHIFT the lanes merge twice: first the walk's max, then the COMBINE of the shifted values.
var<private> merging_max: bool;
#endif

fn lane_merge(a: LaneValue, b: LaneValue) -> LaneValue {
#ifdef SHIFT
    if (merging_max) {
        return max(a, b);
    }
#endif
    return combine(a, b);
}
#else
// A candidate: an element's value and index; NONE marks "no element seen".
struct LaneValue {
    value: #{A},
    index: u32,
}

// Is (vb, ib) a better candidate than (va, ia)?
fn better(va: #{A}, ia: u32, vb: #{A}, ib: u32) -> bool {
#if LAST == 1
    let tie = ib > ia;
#else
    let tie = ib < ia;
#endif
    if (ib == NONE) {
        return false;
    }
    if (ia == NONE) {
        return true;
    }
#if FLOAT == 1
    // A NaN beats every number, as the max and the min do (numpy's and onnx.reference's
    // argmax/argmin; onnxruntime's answer depends on where the NaN sits).
    let nan_a = is_nan(va);
    let nan_b = is_nan(vb);
    if (nan_a || nan_b) {
        return nan_b && (!nan_a || tie);
    }
#endif
    return vb #{CMP} va || (vb == va && tie);
}

fn lane_merge(a: LaneValue, b: LaneValue) -> LaneValue {
    if (better(a.value, a.index, b.value, b.index)) {
        return b;
    }
    return a;
}
#endif

#ifdef ARG
// The index a candidate competes with: its position, or what the previous pass found.
fn index_of(base: u32, r: u32) -> u32 {
#ifdef IDX
    return u32(idx_load(base + offset_of(r)));
#else
    return r;
#endif
}
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#ifdef CHUNK
    let ln = lane_of(wg, M() * PARTS(), K());
#if RED_INNER == 1
    let o = ln.row / PARTS();
    let part = ln.row % PARTS();
#else
    let o = ln.row % M();
    let part = ln.row / M();
#endif
    let start = part * #{CHUNK}u;
    let walk = select(0u, min(K() - min(start, K()), #{CHUNK}u), ln.valid);
#else
    let ln = lane_of(wg, M(), K());
    let o = ln.row;
    let start = 0u;
    let walk = ln.length;
#endif
#ifdef TOTAL
    let n = TOTAL();  // FINAL reads it
#else
    let n = walk;
#endif
    let base = base_of(select(0u, o, ln.valid));

#ifdef SHIFT
    var mx = #{LOWEST};
    for (var r = ln.lane; r < walk; r += LANES) {
        mx = max(mx, load(base, start + r));
    }
    merging_max = true;
    var m = tree_merge(ln, mx);
    merging_max = false;
    if (m == #{LOWEST}) {  // an empty walk or all -inf: shift by 0 so that exp(x - m) is 0, not NaN
        m = #{A}(0);
    }
#else
    let m = #{A}(0);
#endif

#ifndef ARG
    var value = #{INIT};
    for (var r = ln.lane; r < walk; r += LANES) {
        let x = load(base, start + r);
        value = combine(value, #{MAP});
    }
    let acc = tree_merge(ln, value);
    if (ln.valid && ln.lane == 0u) {
        dst_store(ln.row, dst_t(#{FINAL}));
    }
#else
    var best = LaneValue(#{INIT}, NONE);
    for (var r = ln.lane; r < walk; r += LANES) {
        let v = load(base, start + r);
        let index = index_of(base, start + r);
        if (better(best.value, best.index, v, index)) {
            best = LaneValue(v, index);
        }
    }
    let won = tree_merge(ln, best);
    let winner = won.index;
    if (ln.valid && ln.lane == 0u) {
        dst_store(ln.row, dst_t(select(winner, 0u, winner == NONE)));
#ifdef CHUNK
        vals_store(ln.row, vals_t(won.value));
#endif
    }
#endif
}
