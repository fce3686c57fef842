// FusedAttention on a CPU-type adapter as register tiles: softmax(scale * q k^T) v with a
// workgroup of 8 invocations per 16 consecutive query rows of one (batch, head), grid
// (ceil(S / 16), H, B), walking the keys 32 at a time with no scores in memory. The two products
// are the register-tiled product's (matmul/gemv_chunked.wgsl) pattern on each block:
// - scores: invocation l owns the block's keys 4 l .. 4 l + 3 and holds the 16 rows' scores over
//   them (four mat4x4, column r = row 4 J + r); per 4 head elements it loads its keys' 4 x 4 block
//   of K and the lanes hand Q's rows round (lane l loads rows l and 8 + l);
// - online softmax: the block's row maxima are the lanes' maxima merged (4 vec4s), each lane
//   exponentiates its own scores and keeps its part of each row's sum;
// - values: invocation l owns the head's vec4 column groups l (and 8 + l for heads of 64) of the
//   16 output rows (mat4x4 accumulators, column r = row 4 J + r) and adds, for each lane's 4 keys
//   in turn, that lane's probabilities (handed round) times its own columns of those keys' V rows.
// Per block of 16 rows x 32 keys an invocation does 128 D multiply-adds against 5 D / 2 vec4 loads
// and 4 D + 128 vec4 hand-rounds (Q's rows, then the probabilities), where the one-row flash
// kernel (sdpa_flash.wgsl) hands round a K and a V row per key and row group of 8 (lavapipe: see
// operators/attention/fused.py).
// Rows past S compute row S - 1 and store nothing; keys past T (the last block) load key T - 1
// and weigh nothing. The key walk is the only loop whose trips grow with the keys (T / 32, each
// D / 4 + 8 trips, and 32 more where the lanes share through workgroup memory; the planner
// bounds T).
// Operands are read through the views' element strides (every stride a multiple of the head size,
// itself a multiple of 32: rows start on a vec4).
// Where the 8 lanes are one subgroup (ONYXIA_SUBGROUPS_OF_8) values go round by subgroup
// operations, else through workgroup memory between barriers (every call below is in uniform
// control flow).
// Buffers: q, k, v (vec4), y (vec4). Defs: DIM (32 or 64), OFFSETS. Params: H, S, T, SCALE,
// element strides QB/QH/QS, KB/KH/KS, VB/VH/VS, YB/YH/YS; with OFFSETS Q0, K0, V0.
#import attention::operands

const LANES = 8u;
const QR = 16u;  // query rows per workgroup
const D4 = #{DIM}u / 4u;  // vec4s per head row
const OG = #{DIM}u / 32u;  // vec4 column groups of the output an invocation owns (1 or 2)
const BLOCK = 32u;  // keys per block: 4 per invocation
const NEG = -3.0e38;

#ifndef ONYXIA_SUBGROUPS_OF_8
var<workgroup> shared_rows: array<vec4<f32>, 8>;  // one vec4 per lane
var<workgroup> shared_p: array<vec4<f32>, 128>;  // 16 vec4s of probabilities per lane
#endif

// The outputs staged for one store loop: in a private array where the driver compiles one indexed
// at run time as such (ONYXIA_INDEXED_PRIVATE), else each lane's slots of workgroup memory (as
// matmul/gemv_chunked.wgsl stages its rows).
#ifdef ONYXIA_INDEXED_PRIVATE
var<private> staged: array<mat4x4<f32>, 4u * OG>;
fn staged_slot(i: u32, lane: u32) -> u32 {
    return i;
}
#else
var<workgroup> staged: array<mat4x4<f32>, 4u * OG * LANES>;
fn staged_slot(i: u32, lane: u32) -> u32 {
    return i * LANES + lane;
}
#endif

// Component r of the result: the 8 lanes' largest component r of v.
fn lanes_max(v: vec4<f32>, lane: u32) -> vec4<f32> {
#ifdef ONYXIA_SUBGROUPS_OF_8
    // a butterfly: subgroupMax compiled ~0.2 s longer a call on lavapipe (Mesa 25)
    let a = max(v, subgroupShuffleXor(v, 1u));
    let b = max(a, subgroupShuffleXor(a, 2u));
    return max(b, subgroupShuffleXor(b, 4u));
#else
    workgroupBarrier();
    shared_rows[lane] = v;
    workgroupBarrier();
    var m = shared_rows[0];
    for (var l = 1u; l < LANES; l++) {
        m = max(m, shared_rows[l]);
    }
    return m;
#endif
}

fn lanes_sum(v: vec4<f32>, lane: u32) -> vec4<f32> {
#ifdef ONYXIA_SUBGROUPS_OF_8
    let a = v + subgroupShuffleXor(v, 1u);
    let b = a + subgroupShuffleXor(a, 2u);
    return b + subgroupShuffleXor(b, 4u);
#else
    workgroupBarrier();
    shared_rows[lane] = v;
    workgroupBarrier();
    var s = shared_rows[0];
    for (var l = 1u; l < LANES; l++) {
        s += shared_rows[l];
    }
    return s;
#endif
}

// One row group's (4 rows) scores over this lane's keys: column r = row 4 J + r, the block `kq`
// (column kk = the 4 keys' head element 4 d4 + kk) times the rows' 4 elements at d4.
fn rows4(kq: mat4x4<f32>, a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) -> mat4x4<f32> {
    return kq * mat4x4<f32>(a, b, c, d);
}

// A row group's scores over this lane's 4 keys, rescaled: p = exp(s - m) per row (m: the rows'
// new maxima), keys past T zero. Returns the rows' sums over the 4 keys in `sums`.
fn probabilities(s: mat4x4<f32>, m: vec4<f32>, live: vec4<f32>, sums: ptr<function, vec4<f32>>) -> mat4x4<f32> {
    let p = mat4x4<f32>(exp(s[0] - m.x) * live, exp(s[1] - m.y) * live, exp(s[2] - m.z) * live, exp(s[3] - m.w) * live);
    *sums = vec4<f32>(dot(p[0], vec4(1.0)), dot(p[1], vec4(1.0)), dot(p[2], vec4(1.0)), dot(p[3], vec4(1.0)));
    return p;
}

// The scores' row maxima over this lane's live keys (NEG past T).
fn row_max(s: mat4x4<f32>, live: vec4<bool>) -> vec4<f32> {
    let a = select(vec4(NEG), s[0], live);
    let b = select(vec4(NEG), s[1], live);
    let c = select(vec4(NEG), s[2], live);
    let d = select(vec4(NEG), s[3], live);
    return vec4<f32>(max(max(a.x, a.y), max(a.z, a.w)), max(max(b.x, b.y), max(b.z, b.w)),
                     max(max(c.x, c.y), max(c.z, c.w)), max(max(d.x, d.y), max(d.z, d.w)));
}

// An accumulator's columns (rows) scaled by `f` (one factor per row).
fn rescaled(o: mat4x4<f32>, f: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(o[0] * f.x, o[1] * f.y, o[2] * f.z, o[3] * f.w);
}

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32
#ifdef ONYXIA_SUBGROUPS
        , @builtin(subgroup_invocation_id) sg_id: u32
#endif
        ) {
#ifdef ONYXIA_SUBGROUPS_OF_8
    let lane = sg_id;  // numbered as the subgroup numbers its lanes
#else
    let lane = lid;
#endif
    let h = wid.y;
    let b = wid.z;
    let r0 = wid.x * QR;
    let at = operand_offsets();
    let qbase = at.x + b * QB() + h * QH();
    let kbase = at.y + b * KB() + h * KH();
    let vbase = at.z + b * VB() + h * VH();
    let last_row = S() - 1u;
    // this lane's two query rows, as vec4 indices
    let qa = (qbase + min(r0 + lane, last_row) * QS()) / 4u;
    let qb = (qbase + min(r0 + 8u + lane, last_row) * QS()) / 4u;
    let t = T();
    // running row maxima (rows 4 J .. 4 J + 3) and this lane's part of the row sums
    var m0 = vec4(NEG);
    var m1 = vec4(NEG);
    var m2 = vec4(NEG);
    var m3 = vec4(NEG);
    var l0 = vec4(0.0);
    var l1 = vec4(0.0);
    var l2 = vec4(0.0);
    var l3 = vec4(0.0);
    // outputs: oJg = rows 4 J .. + 3 at column group lane + 8 g
    var o00 = mat4x4<f32>();
    var o10 = mat4x4<f32>();
    var o20 = mat4x4<f32>();
    var o30 = mat4x4<f32>();
#if DIM == 64
    var o01 = mat4x4<f32>();
    var o11 = mat4x4<f32>();
    var o21 = mat4x4<f32>();
    var o31 = mat4x4<f32>();
#endif
    for (var k0 = 0u; k0 < t; k0 += BLOCK) {
        // this lane's keys, clamped to the last; a key past T weighs nothing
        let key = k0 + 4u * lane;
        let keys = min(vec4<u32>(key, key + 1u, key + 2u, key + 3u), vec4(t - 1u));
        let live = vec4<u32>(key, key + 1u, key + 2u, key + 3u) < vec4(t);
        let krow = (vec4(kbase) + keys * KS()) / 4u;
        var s0 = mat4x4<f32>();
        var s1 = mat4x4<f32>();
        var s2 = mat4x4<f32>();
        var s3 = mat4x4<f32>();
        for (var d4 = 0u; d4 < D4; d4++) {
            let kq = transpose(mat4x4<f32>(vec4<f32>(k_load4(krow.x + d4)), vec4<f32>(k_load4(krow.y + d4)),
                                           vec4<f32>(k_load4(krow.z + d4)), vec4<f32>(k_load4(krow.w + d4))));
            let qa4 = vec4<f32>(q_load4(qa + d4));
            let qb4 = vec4<f32>(q_load4(qb + d4));
#ifdef ONYXIA_SUBGROUPS_OF_8
            s0 += rows4(kq, subgroupBroadcast(qa4, 0u), subgroupBroadcast(qa4, 1u), subgroupBroadcast(qa4, 2u), subgroupBroadcast(qa4, 3u));
            s1 += rows4(kq, subgroupBroadcast(qa4, 4u), subgroupBroadcast(qa4, 5u), subgroupBroadcast(qa4, 6u), subgroupBroadcast(qa4, 7u));
            s2 += rows4(kq, subgroupBroadcast(qb4, 0u), subgroupBroadcast(qb4, 1u), subgroupBroadcast(qb4, 2u), subgroupBroadcast(qb4, 3u));
            s3 += rows4(kq, subgroupBroadcast(qb4, 4u), subgroupBroadcast(qb4, 5u), subgroupBroadcast(qb4, 6u), subgroupBroadcast(qb4, 7u));
#else
            workgroupBarrier();
            shared_p[lane] = qa4;
            shared_p[8u + lane] = qb4;
            workgroupBarrier();
            s0 += rows4(kq, shared_p[0], shared_p[1], shared_p[2], shared_p[3]);
            s1 += rows4(kq, shared_p[4], shared_p[5], shared_p[6], shared_p[7]);
            s2 += rows4(kq, shared_p[8], shared_p[9], shared_p[10], shared_p[11]);
            s3 += rows4(kq, shared_p[12], shared_p[13], shared_p[14], shared_p[15]);
#endif
        }
        let scale = SCALE();
        s0 *= scale;
        s1 *= scale;
        s2 *= scale;
        s3 *= scale;
        // the block's row maxima, the running ones raised to them, the old sums and outputs rescaled
        let n0 = max(m0, lanes_max(row_max(s0, live), lane));
        let n1 = max(m1, lanes_max(row_max(s1, live), lane));
        let n2 = max(m2, lanes_max(row_max(s2, live), lane));
        let n3 = max(m3, lanes_max(row_max(s3, live), lane));
        let a0 = exp(m0 - n0);
        let a1 = exp(m1 - n1);
        let a2 = exp(m2 - n2);
        let a3 = exp(m3 - n3);
        m0 = n0;
        m1 = n1;
        m2 = n2;
        m3 = n3;
        let w = select(vec4(0.0), vec4(1.0), live);
        var sum: vec4<f32>;
        let p0 = probabilities(s0, n0, w, &sum);
        l0 = l0 * a0 + sum;
        let p1 = probabilities(s1, n1, w, &sum);
        l1 = l1 * a1 + sum;
        let p2 = probabilities(s2, n2, w, &sum);
        l2 = l2 * a2 + sum;
        let p3 = probabilities(s3, n3, w, &sum);
        l3 = l3 * a3 + sum;
        o00 = rescaled(o00, a0);
        o10 = rescaled(o10, a1);
        o20 = rescaled(o20, a2);
        o30 = rescaled(o30, a3);
#if DIM == 64
        o01 = rescaled(o01, a0);
        o11 = rescaled(o11, a1);
        o21 = rescaled(o21, a2);
        o31 = rescaled(o31, a3);
#endif
#ifndef ONYXIA_SUBGROUPS_OF_8
        workgroupBarrier();
        for (var r = 0u; r < 4u; r++) {
            shared_p[16u * lane + r] = p0[r];
            shared_p[16u * lane + 4u + r] = p1[r];
            shared_p[16u * lane + 8u + r] = p2[r];
            shared_p[16u * lane + 12u + r] = p3[r];
        }
        workgroupBarrier();
#endif
        // each lane's 4 keys in turn: its probabilities times this lane's columns of their V rows
        for (var src = 0u; src < LANES; src++) {
            let vkey = min(vec4(k0 + 4u * src) + vec4<u32>(0u, 1u, 2u, 3u), vec4(t - 1u));
            let vrow = (vec4(vbase) + vkey * VS()) / 4u + vec4(lane);
            let v0 = mat4x4<f32>(vec4<f32>(v_load4(vrow.x)), vec4<f32>(v_load4(vrow.y)),
                                 vec4<f32>(v_load4(vrow.z)), vec4<f32>(v_load4(vrow.w)));
#if DIM == 64
            let v1 = mat4x4<f32>(vec4<f32>(v_load4(vrow.x + 8u)), vec4<f32>(v_load4(vrow.y + 8u)),
                                 vec4<f32>(v_load4(vrow.z + 8u)), vec4<f32>(v_load4(vrow.w + 8u)));
#endif
#ifdef ONYXIA_SUBGROUPS_OF_8
            let q0 = mat4x4<f32>(subgroupShuffle(p0[0], src), subgroupShuffle(p0[1], src),
                                 subgroupShuffle(p0[2], src), subgroupShuffle(p0[3], src));
            let q1 = mat4x4<f32>(subgroupShuffle(p1[0], src), subgroupShuffle(p1[1], src),
                                 subgroupShuffle(p1[2], src), subgroupShuffle(p1[3], src));
            let q2 = mat4x4<f32>(subgroupShuffle(p2[0], src), subgroupShuffle(p2[1], src),
                                 subgroupShuffle(p2[2], src), subgroupShuffle(p2[3], src));
            let q3 = mat4x4<f32>(subgroupShuffle(p3[0], src), subgroupShuffle(p3[1], src),
                                 subgroupShuffle(p3[2], src), subgroupShuffle(p3[3], src));
#else
            let q0 = mat4x4<f32>(shared_p[16u * src], shared_p[16u * src + 1u], shared_p[16u * src + 2u],
                                 shared_p[16u * src + 3u]);
            let q1 = mat4x4<f32>(shared_p[16u * src + 4u], shared_p[16u * src + 5u], shared_p[16u * src + 6u],
                                 shared_p[16u * src + 7u]);
            let q2 = mat4x4<f32>(shared_p[16u * src + 8u], shared_p[16u * src + 9u], shared_p[16u * src + 10u],
                                 shared_p[16u * src + 11u]);
            let q3 = mat4x4<f32>(shared_p[16u * src + 12u], shared_p[16u * src + 13u], shared_p[16u * src + 14u],
                                 shared_p[16u * src + 15u]);
#endif
            o00 += v0 * q0;
            o10 += v0 * q1;
            o20 += v0 * q2;
            o30 += v0 * q3;
#if DIM == 64
            o01 += v1 * q0;
            o11 += v1 * q1;
            o21 += v1 * q2;
            o31 += v1 * q3;
#endif
        }
    }
    // 1 / the row sums (every row has a live key: its maximum weighs 1)
    let i0 = 1.0 / lanes_sum(l0, lane);
    let i1 = 1.0 / lanes_sum(l1, lane);
    let i2 = 1.0 / lanes_sum(l2, lane);
    let i3 = 1.0 / lanes_sum(l3, lane);
    let ybase = b * YB() + h * YH();
    // the rows through one store loop (a store site per row group compiled ~1.5x as long)
    staged[staged_slot(0u, lane)] = rescaled(o00, i0);
    staged[staged_slot(1u, lane)] = rescaled(o10, i1);
    staged[staged_slot(2u, lane)] = rescaled(o20, i2);
    staged[staged_slot(3u, lane)] = rescaled(o30, i3);
#if DIM == 64
    staged[staged_slot(4u, lane)] = rescaled(o01, i0);
    staged[staged_slot(5u, lane)] = rescaled(o11, i1);
    staged[staged_slot(6u, lane)] = rescaled(o21, i2);
    staged[staged_slot(7u, lane)] = rescaled(o31, i3);
#endif
    // x = 16 g + 4 J + j: row r0 + 4 J + j of column group lane + 8 g
    for (var x = 0u; x < 16u * OG; x++) {
        let r = r0 + x % 16u;
        if (r < S()) {
            y_store4((ybase + r * YS()) / 4u + lane + 8u * (x / 16u), staged[staged_slot(x / 4u, lane)][x % 4u]);
        }
    }
}
