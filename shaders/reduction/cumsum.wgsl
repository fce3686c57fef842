// Prefix sums along one axis (products with OP "*" and IDENTITY 1: CumProd). A line is the K
// elements x[base + j * INNER]; LANES threads (reduction::lanes) scan it in chunks of LANES
// elements: a Hillis-Steele scan in shared memory per chunk plus the running total of the
// chunks before. A workgroup serves 256 / LANES lines.
// Defs: T (storage type), OP (+ or *) and its IDENTITY (0 or 1), LANES, RED_INNER (1), REVERSE
// (scan from the end), EXCLUSIVE (element j combines the elements before it; the first gets
// IDENTITY). Params: L (lines), K (line length), INNER (element stride).
#import reduction::lanes

@group(0) @binding(0) var<storage, read> src: array<#{T}>;
@group(0) @binding(1) var<storage, read_write> dst: array<#{T}>;

var<workgroup> sh: array<#{T}, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let ln = lane_of(wg, L(), K());
    let line = ln.row;
    let rl = ln.lane;
    let lid = ln.slot;
    let base = (line / INNER()) * K() * INNER() + line % INNER();
    let chunks = (K() + LANES - 1u) / LANES;
    var carry = #{T}(#{IDENTITY});
    for (var c = 0u; c < chunks; c++) {
        let j = c * LANES + rl;
        let live = j < ln.length;
#ifdef REVERSE
        let idx = base + (K() - 1u - j) * INNER();
#else
        let idx = base + j * INNER();
#endif
        var v = #{T}(#{IDENTITY});
        if (live) {
            v = src[idx];
        }
        sh[lid] = v;
        // Inclusive scan of this line's chunk; lanes below `s` have no partner at distance s.
        for (var s = 1u; s < LANES; s *= 2u) {
            workgroupBarrier();
            var add = #{T}(#{IDENTITY});
            if (rl >= s) {
                add = sh[lid - s];
            }
            workgroupBarrier();
            sh[lid] = sh[lid] #{OP} add;
        }
        workgroupBarrier();
#ifdef EXCLUSIVE
        var out = carry;
        if (rl > 0u) {
            out = out #{OP} sh[lid - 1u];
        }
#else
        let out = carry #{OP} sh[lid];
#endif
        if (live) {
            dst[idx] = out;
        }
        carry = carry #{OP} sh[lid - rl + LANES - 1u];
        workgroupBarrier();  // the next chunk overwrites sh
    }
}
