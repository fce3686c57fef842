// Prefix sums along one axis (products with COMBINE `a * b` and IDENTITY 1: CumProd). A line is
// the K elements x[base + j * INNER]; LANES threads (reduction::lanes) scan it in chunks of LANES
// elements: a Hillis-Steele scan in shared memory per chunk plus the running total of the
// chunks before. A workgroup serves 256 / LANES lines.
// Buffers: src, dst (scanned in dst_t). Defs: COMBINE (over a and b: `a + b`, `a * b`, or their
// checked int64 forms) and its IDENTITY (0 or 1), LANES, RED_INNER (1), REVERSE (scan from the
// end), EXCLUSIVE (element j combines the elements before it; the first gets IDENTITY).
// Params: L (lines), K (line length), INNER (element stride).
#import reduction::lanes

var<workgroup> sh: array<dst_t, WORKGROUP_SIZE>;

fn combine(a: dst_t, b: dst_t) -> dst_t {
    return #{COMBINE};
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let ln = lane_of(wg, L(), K());
    let line = ln.row;
    let rl = ln.lane;
    let lid = ln.slot;
    let base = (line / INNER()) * K() * INNER() + line % INNER();
    let chunks = (K() + LANES - 1u) / LANES;
    var carry = dst_t(#{IDENTITY});
    for (var c = 0u; c < chunks; c++) {
        let j = c * LANES + rl;
        let live = j < ln.length;
#ifdef REVERSE
        let idx = base + (K() - 1u - j) * INNER();
#else
        let idx = base + j * INNER();
#endif
        var v = dst_t(#{IDENTITY});
        if (live) {
            v = dst_t(src_load(idx));
        }
        sh[lid] = v;
        // Inclusive scan of this line's chunk; lanes below `s` have no partner at distance s.
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
#ifdef EXCLUSIVE
        var out = carry;
        if (rl > 0u) {
            out = combine(out, sh[lid - 1u]);
        }
#else
        let out = combine(carry, sh[lid]);
#endif
        if (live) {
            dst_store(idx, out);
        }
        carry = combine(carry, sh[lid - rl + LANES - 1u]);
        workgroupBarrier();  // the next chunk overwrites sh
    }
}
