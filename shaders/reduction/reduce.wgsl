// Reduction over a strided walk: y[o] = FINAL(COMBINE over r < K of MAP(x[base_of(o) + offset_of(r)])).
// LANES threads (a power of two) share each output and meet in a shared-memory tree; a
// workgroup of 256 threads serves 256 / LANES outputs.
// Defs: T / TY (input / output storage types), A (accumulator type), LANES, RED_INNER (1: the
// lanes of one output are adjacent threads, the walk is contiguous; 0: adjacent threads take
// adjacent outputs), BASE / OFFSET (generated functions base_of(o) and offset_of(r)), INIT.
// Value mode: MAP (over x: A and the shift m: A), COMBINE (over a, b), FINAL (over acc: A and
// n: u32), SHIFT (first find the max m of the walk; LOWEST is A's lowest value).
// ARG mode (ArgMax/ArgMin): CMP (">" or "<"), LAST (1: ties take the last index); writes i32.
// Params: M (outputs), K (elements per output) and the dims/strides BASE and OFFSET read.
@group(0) @binding(0) var<storage, read> src: array<#{T}>;
@group(0) @binding(1) var<storage, read_write> dst: array<#{TY}>;

const LANES: u32 = #{LANES}u;
const OUTS: u32 = 256u / LANES;
#if RED_INNER == 1
const STEP: u32 = 1u;  // shared-memory distance between neighbouring lanes of one output
#else
const STEP: u32 = OUTS;
#endif
const NONE: u32 = 0xffffffffu;

var<workgroup> acc_sh: array<#{A}, 256>;
#ifdef ARG
var<workgroup> idx_sh: array<u32, 256>;
#endif

#{BASE}

#{OFFSET}

fn load(base: u32, r: u32) -> #{A} {
    return #{A}(src[base + offset_of(r)]);
}

#ifndef ARG
fn combine(a: #{A}, b: #{A}) -> #{A} {
    return #{COMBINE};
}
#else
// Is (vb, ib) a better candidate than (va, ia)? NONE marks "no element seen".
fn better(va: #{A}, ia: u32, vb: #{A}, ib: u32) -> bool {
#if LAST == 1
    let tie = ib > ia;
#else
    let tie = ib < ia;
#endif
    return ib != NONE && (ia == NONE || vb #{CMP} va || (vb == va && tie));
}
#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
#if RED_INNER == 1
    let ol = lid / LANES;
    let rl = lid % LANES;
#else
    let ol = lid % OUTS;
    let rl = lid / OUTS;
#endif
    let o = (wid.y * nwg.x + wid.x) * OUTS + ol;
    let valid = o < M();
    // Threads past the end walk nothing but still reach every barrier.
    let n = select(0u, K(), valid);
    let base = base_of(select(0u, o, valid));
    let head = lid - rl * STEP;  // slot of lane 0 of this output

#ifdef SHIFT
    var mx = #{LOWEST};
    for (var r = rl; r < n; r += LANES) {
        mx = max(mx, load(base, r));
    }
    acc_sh[lid] = mx;
    for (var s = LANES / 2u; s > 0u; s /= 2u) {
        workgroupBarrier();
        if (rl < s) {
            acc_sh[lid] = max(acc_sh[lid], acc_sh[lid + s * STEP]);
        }
    }
    workgroupBarrier();
    var m = acc_sh[head];
    workgroupBarrier();
    if (m == #{LOWEST}) {  // an empty walk or all -inf: shift by 0 so that exp(x - m) is 0, not NaN
        m = #{A}(0);
    }
#else
    let m = #{A}(0);
#endif

#ifndef ARG
    var part = #{INIT};
    for (var r = rl; r < n; r += LANES) {
        let x = load(base, r);
        part = combine(part, #{MAP});
    }
    acc_sh[lid] = part;
    for (var s = LANES / 2u; s > 0u; s /= 2u) {
        workgroupBarrier();
        if (rl < s) {
            acc_sh[lid] = combine(acc_sh[lid], acc_sh[lid + s * STEP]);
        }
    }
    workgroupBarrier();
    if (valid && rl == 0u) {
        let acc = acc_sh[lid];
        dst[o] = #{TY}(#{FINAL});
    }
#else
    var best = #{INIT};
    var bi = NONE;
    for (var r = rl; r < n; r += LANES) {
        let v = load(base, r);
        if (better(best, bi, v, r)) {
            best = v;
            bi = r;
        }
    }
    acc_sh[lid] = best;
    idx_sh[lid] = bi;
    for (var s = LANES / 2u; s > 0u; s /= 2u) {
        workgroupBarrier();
        if (rl < s) {
            let j = lid + s * STEP;
            if (better(acc_sh[lid], idx_sh[lid], acc_sh[j], idx_sh[j])) {
                acc_sh[lid] = acc_sh[j];
                idx_sh[lid] = idx_sh[j];
            }
        }
    }
    workgroupBarrier();
    if (valid && rl == 0u) {
        dst[o] = #{TY}(select(idx_sh[lid], 0u, idx_sh[lid] == NONE));
    }
#endif
}
