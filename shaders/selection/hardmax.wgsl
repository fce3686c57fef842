// Hardmax: y = 1 at the first maximum of each line, 0 elsewhere. A line is x[base + r * INNER]
// for r < N, base = (line / INNER) * N * INNER + line % INNER. LANES threads (reduction::lanes)
// share a line: each finds its first maximum, reduction::tree keeps the lowest index among
// equal maxima, then the lanes write the line.
// Defs: T (storage type), LANES, RED_INNER (1). Params: L (lines), N (line length), INNER
// (element stride).
#import reduction::tree

@group(0) @binding(0) var<storage, read> x: array<#{T}>;
@group(0) @binding(1) var<storage, read_write> y: array<#{T}>;

const NONE: u32 = 0xffffffffu;

// A lane's first maximum so far: its value and index (NONE: no element seen).
struct LaneValue {
    value: #{T},
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
    var best = LaneValue(#{T}(0), NONE);
    for (var r = ln.lane; r < ln.length; r += LANES) {
        let v = x[base + r * INNER()];
        if (best.index == NONE || v > best.value) {
            best = LaneValue(v, r);
        }
    }
    let winner = tree_merge(ln, best).index;
    for (var r = ln.lane; r < ln.length; r += LANES) {
        y[base + r * INNER()] = select(#{T}(0), #{T}(1), r == winner);
    }
}
