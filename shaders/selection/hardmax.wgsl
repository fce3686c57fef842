// Hardmax: y = 1 at the first maximum of each line, 0 elsewhere. A line is x[base + r * INNER]
// for r < N, base = (line / INNER) * N * INNER + line % INNER. LANES threads (a power of two)
// share a line: each finds its first maximum, a shared-memory tree keeps the lowest index among
// equal maxima, then the lanes write the line.
// Defs: T (storage type), LANES. Params: L (lines), N (line length), INNER (element stride).
@group(0) @binding(0) var<storage, read> x: array<#{T}>;
@group(0) @binding(1) var<storage, read_write> y: array<#{T}>;

const LANES: u32 = #{LANES}u;
const LINES: u32 = 256u / LANES;
const NONE: u32 = 0xffffffffu;

var<workgroup> bv: array<#{T}, 256>;
var<workgroup> bi: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let ol = lid / LANES;
    let rl = lid % LANES;
    let line = (wid.y * nwg.x + wid.x) * LINES + ol;
    // Threads past the last line walk nothing but still reach every barrier.
    let n = select(0u, N(), line < L());
    let base = (line / INNER()) * N() * INNER() + line % INNER();
    var best = #{T}(0);
    var idx = NONE;
    for (var r = rl; r < n; r += LANES) {
        let v = x[base + r * INNER()];
        if (idx == NONE || v > best) {
            best = v;
            idx = r;
        }
    }
    bv[lid] = best;
    bi[lid] = idx;
    for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        let o = lid + s;
        if (rl < s && bi[o] != NONE && (bi[lid] == NONE || bv[o] > bv[lid] || (bv[o] == bv[lid] && bi[o] < bi[lid]))) {
            bv[lid] = bv[o];
            bi[lid] = bi[o];
        }
    }
    workgroupBarrier();
    let winner = bi[lid - rl];
    for (var r = rl; r < n; r += LANES) {
        y[base + r * INNER()] = select(#{T}(0), #{T}(1), r == winner);
    }
}
