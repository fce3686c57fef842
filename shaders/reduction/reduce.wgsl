// Reduction over a strided walk: y[o] = FINAL(COMBINE over r < K of MAP(x[base_of(o) + offset_of(r)])).
// LANES threads share each output (reduction::lanes) and meet in reduction::tree; a workgroup
// of 256 threads serves 256 / LANES outputs.
// Buffers: src, dst. Defs: A (accumulator type), LANES, RED_INNER (1: the
// lanes of one output are adjacent threads, the walk is contiguous; 0: adjacent threads take
// adjacent outputs), BASE / OFFSET (generated functions base_of(o) and offset_of(r)), INIT.
// Value mode: MAP (over x: A and the shift m: A), COMBINE (over a, b), FINAL (over acc: A and
// n: u32), SHIFT (first find the max m of the walk; LOWEST is A's lowest value).
// ARG mode (ArgMax/ArgMin): CMP (">" or "<"), LAST (1: ties take the last index); writes i32.
// Params: M (outputs), K (elements per output) and the dims/strides BASE and OFFSET read.
#import reduction::tree

const NONE: u32 = 0xffffffffu;

#{BASE}

#{OFFSET}

fn load(base: u32, r: u32) -> #{A} {
    return #{A}(src_load(base + offset_of(r)));
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
    return ib != NONE && (ia == NONE || vb #{CMP} va || (vb == va && tie));
}

fn lane_merge(a: LaneValue, b: LaneValue) -> LaneValue {
    if (better(a.value, a.index, b.value, b.index)) {
        return b;
    }
    return a;
}
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let ln = lane_of(wg, M(), K());
    let n = ln.length;  // FINAL reads it
    let base = base_of(select(0u, ln.row, ln.valid));

#ifdef SHIFT
    var mx = #{LOWEST};
    for (var r = ln.lane; r < n; r += LANES) {
        mx = max(mx, load(base, r));
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
    var part = #{INIT};
    for (var r = ln.lane; r < n; r += LANES) {
        let x = load(base, r);
        part = combine(part, #{MAP});
    }
    let acc = tree_merge(ln, part);
    if (ln.valid && ln.lane == 0u) {
        dst_store(ln.row, dst_t(#{FINAL}));
    }
#else
    var best = LaneValue(#{INIT}, NONE);
    for (var r = ln.lane; r < n; r += LANES) {
        let v = load(base, r);
        if (better(best.value, best.index, v, r)) {
            best = LaneValue(v, r);
        }
    }
    let winner = tree_merge(ln, best).index;
    if (ln.valid && ln.lane == 0u) {
        dst_store(ln.row, dst_t(select(winner, 0u, winner == NONE)));
    }
#endif
}
