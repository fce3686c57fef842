// Prefix sums along one axis (products with COMBINE `a * b` and IDENTITY 1: CumProd). A line is
// the K elements x[base + j * INNER]; LANES threads (reduction::lanes) scan it in chunks of LANES
// elements: a Hillis-Steele scan in shared memory per chunk plus the running total of the
// chunks before. A workgroup serves 256 / LANES lines.
// Buffers: src, dst (scanned in dst_t). Defs: COMBINE (over a and b: `a + b`, `a * b`, or their
// checked int64 forms) and its IDENTITY (0 or 1), LANES, RED_INNER (1), REVERSE (scan from the
// end), EXCLUSIVE (element j combines the elements before it; the first gets IDENTITY).
// Params: L (lines), K (line length), INNER (element stride).
// A line longer than an invocation may loop over (lavapipe stops an invocation's loops after
// ~65,535 iterations) is PARTS (param) parts of CHUNK (def) elements in scan order, grid row v
// being part v % PARTS of line v / PARTS: with PART_TOTALS each part writes its total to
// `totals` (and nothing to dst; its lanes sum their elements in registers, one scan at the end);
// with PART_CARRY each part starts from the combined totals of the parts before it (its lanes
// take every LANES-th of them, then one scan combines the lanes').
// Def WG_SIZE: a workgroup of another size (one line of LANES = WG_SIZE lanes on a CPU adapter).
#import reduction::lanes

var<workgroup> sh: array<dst_t, WORKGROUP_SIZE>;

fn combine(a: dst_t, b: dst_t) -> dst_t {
    return #{COMBINE};
}

// Inclusive scan of `v` over the LANES lanes of this thread's line (Hillis-Steele in shared
// memory); sh[lid - rl + LANES - 1] holds the line's total until the next barrier.
fn lane_scan(lid: u32, rl: u32, v: dst_t) -> dst_t {
    sh[lid] = v;
    // Lanes below `s` have no partner at distance s.
    for (var s = 1u; s < LANES; s *= 2u) {
        workgroupBarrier();
        var other = dst_t(#{IDENTITY});
        if (rl >= s) {
            other = sh[lid - s];
        }
        workgroupBarrier();
        sh[lid] = combine(sh[lid], other);
    }
    workgroupBarrier();
    return sh[lid];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#ifdef CHUNK
    let ln = lane_of(wg, L() * PARTS(), K());
    let line = ln.row / PARTS();
    let part = ln.row % PARTS();
    let start = part * #{CHUNK}u;
    let walk = select(0u, min(K() - min(start, K()), #{CHUNK}u), ln.valid);
    // Uniform across the workgroup (its barriers): the longest part's chunks.
    let chunks = (min(K(), #{CHUNK}u) + LANES - 1u) / LANES;
#else
    let ln = lane_of(wg, L(), K());
    let line = ln.row;
    let start = 0u;
    let walk = ln.length;
    let chunks = (K() + LANES - 1u) / LANES;
#endif
    let rl = ln.lane;
    let lid = ln.slot;
    let base = (line / INNER()) * K() * INNER() + line % INNER();
    var carry = dst_t(#{IDENTITY});
#ifdef PART_CARRY
    // The parts before this one: lane rl takes parts rl, rl + LANES, ... (PARTS / LANES trips:
    // a few hundred at most, K elements of a binding of at most 128 MiB over CHUNK), then the
    // lanes' carries are combined.
    if (PARTS() > 1u) {
        for (var p = rl; p < select(0u, part, ln.valid); p += LANES) {
            carry = combine(carry, totals_load(line * PARTS() + p));
        }
    }
    lane_scan(lid, rl, carry);
    carry = sh[lid - rl + LANES - 1u];
    workgroupBarrier();
#endif
    for (var c = 0u; c < chunks; c++) {
        let local = c * LANES + rl;
        let j = start + local;
        let live = local < walk;
#ifdef REVERSE
        let idx = base + (K() - 1u - min(j, K() - 1u)) * INNER();
#else
        let idx = base + j * INNER();
#endif
        var v = dst_t(#{IDENTITY});
        if (live) {
            v = dst_t(src_load(idx));
        }
#ifdef PART_TOTALS
        carry = combine(carry, v);
    }
    // The lanes' sums, combined.
    lane_scan(lid, rl, carry);
    if (ln.valid && rl == 0u) {
        totals_store(ln.row, sh[lid - rl + LANES - 1u]);
    }
#else
        let scanned = lane_scan(lid, rl, v);
#ifdef EXCLUSIVE
        var out = carry;
        if (rl > 0u) {
            out = combine(out, sh[lid - 1u]);
        }
#else
        let out = combine(carry, scanned);
#endif
        if (live) {
            dst_store(idx, out);
        }
        carry = combine(carry, sh[lid - rl + LANES - 1u]);
        workgroupBarrier();  // the next chunk overwrites sh
    }
#endif
}
