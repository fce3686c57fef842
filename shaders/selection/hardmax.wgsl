// Hardmax: y = 1 at the first maximum of each line, 0 elsewhere. A line is x[base + r * INNER]
// for r < N, base = (line / INNER) * N * INNER + line % INNER. LANES threads (reduction::lanes)
// share a line: each finds its first maximum, reduction::tree keeps the lowest index among
// equal maxima, then the lanes write the line.
// Buffers: x, y. Defs: LANES, RED_INNER (1). Params: L (lines), N (line length), INNER
// (element stride).
#import reduction::tree

const NONE: u32 = 0xffffffffu;

// A lane's first maximum so far: its value and index (NONE: no element seen).
struct LaneValue {
    value: x_t,
    index: u32,
}

fn lane_merge(a: LaneValue, b: LaneValue) -> LaneValue {
    if (b.index != NONE && (a.index == NONE || b.value > a.value || (b.value == a.value && b.index < a.index))) {
        return b;
    }
    return a;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let ln = lane_of(wg, L(), N());
    let line = ln.row;
    let base = (line / INNER()) * N() * INNER() + line % INNER();
    var best = LaneValue(x_t(0), NONE);
    for (var r = ln.lane; r < ln.length; r += LANES) {
        let v = x_load(base + r * INNER());
        if (best.index == NONE || v > best.value) {
            best = LaneValue(v, r);
        }
    }
    let winner = tree_merge(ln, best).index;
    for (var r = ln.lane; r < ln.length; r += LANES) {
        y_store(base + r * INNER(), select(y_t(0), y_t(1), r == winner));
    }
}
