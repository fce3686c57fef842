// Normalization by statistics over a strided walk (InstanceNorm, GroupNorm, MVN, LpNorm):
// row o is the elements x[base_of(o) + offset_of(r)], r < K. LANES threads (a power of two)
// share a row and merge two sums through a shared-memory tree (as reduction/reduce.wgsl:
// RED_INNER 1 = a row's lanes are adjacent threads, 0 = adjacent threads take adjacent rows);
// a second pass writes y at the same positions.
// Defs: LANES, RED_INNER, BASE / OFFSET (generated walk functions), OUT:
//   meanvar  y = (x - mean) / sqrt(var + EPS), or / (sqrt(var) + EPS) with EPS_OUTSIDE;
//   lp1/lp2  y = x / (sum |x| | sqrt(sum x^2)), 0 where the norm is 0.
// SCALE / BIAS (bindings 1 / B_BIAS): per-channel affine, channel of element f being
// (f / CH_INNER) % CH_COUNT. B_Y: binding of y.
// Params: M (rows), K, EPS, CH_INNER, CH_COUNT, and the walks' dims and strides.
@group(0) @binding(0) var<storage, read> x: array<f32>;
#ifdef SCALE
@group(0) @binding(1) var<storage, read> scale: array<f32>;
#endif
#ifdef BIAS
@group(0) @binding(#{B_BIAS}) var<storage, read> bias: array<f32>;
#endif
@group(0) @binding(#{B_Y}) var<storage, read_write> y: array<f32>;

const LANES: u32 = #{LANES}u;
const ROWS: u32 = 256u / LANES;
#if RED_INNER == 1
const STEP: u32 = 1u;
#else
const STEP: u32 = ROWS;
#endif

var<workgroup> sh: array<vec2<f32>, 256>;

#{BASE}

#{OFFSET}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
#if RED_INNER == 1
    let ol = lid / LANES;
    let rl = lid % LANES;
#else
    let ol = lid % ROWS;
    let rl = lid / ROWS;
#endif
    let o = (wid.y * nwg.x + wid.x) * ROWS + ol;
    let valid = o < M();
    // Threads past the last row walk nothing but still reach every barrier.
    let n = select(0u, K(), valid);
    let base = base_of(select(0u, o, valid));
    // Sums of d = x - c and d^2, c the row's first element: accurate when |mean| >> std.
    var c = 0.0;
#if OUT == meanvar
    if (n > 0u) {
        c = x[base + offset_of(0u)];
    }
#endif
    var st = vec2<f32>(0.0);
    for (var r = rl; r < n; r += LANES) {
        let d = x[base + offset_of(r)] - c;
#if OUT == lp1
        st += vec2<f32>(abs(d), 0.0);
#else
        st += vec2<f32>(d, d * d);
#endif
    }
    sh[lid] = st;
    for (var s = LANES / 2u; s > 0u; s /= 2u) {
        workgroupBarrier();
        if (rl < s) {
            sh[lid] = sh[lid] + sh[lid + s * STEP];
        }
    }
    workgroupBarrier();
    let total = sh[lid - rl * STEP];
#if OUT == meanvar
    let count = f32(max(n, 1u));
    let dm = total.x / count;
    let mean = c + dm;
    let variance = max(total.y / count - dm * dm, 0.0);
#ifdef EPS_OUTSIDE
    let inv = 1.0 / (sqrt(variance) + EPS());
#else
    let inv = 1.0 / sqrt(variance + EPS());
#endif
#else
    let mean = 0.0;
#if OUT == lp1
    let norm = total.x;
#else
    let norm = sqrt(total.y);
#endif
    let inv = select(1.0 / norm, 0.0, norm == 0.0);
#endif
    for (var r = rl; r < n; r += LANES) {
        let f = base + offset_of(r);
        var v = (x[f] - mean) * inv;
#ifdef SCALE
        v *= scale[(f / CH_INNER()) % CH_COUNT()];
#endif
#ifdef BIAS
        v += bias[(f / CH_INNER()) % CH_COUNT()];
#endif
        y[f] = v;
    }
}
