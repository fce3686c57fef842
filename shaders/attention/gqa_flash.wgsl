// GroupQueryAttention, step 2 on a CPU-type adapter: flash-style tiling.
//
// gqa_attention.wgsl gives each query row its own workgroup, so every row re-reads its whole K/V
// prefix. Here a workgroup of 8 invocations holds 8 (query head, query row) pairs that read the
// same KV head: HB heads of one KV group (HB a power of two dividing the group's size) times
// RB = 8 / HB consecutive rows; grid (H / HB, ceil(S / RB), B * SPLITS). It walks the union of
// its rows' visible keys once, QT = 4 keys per step, with an online softmax per row (each row
// masks the keys it does not see): K and V are read once per 8 query rows instead of once per
// row, and a decode step (S = 1) reads them once per HB heads. No barriers and no shared memory:
// lavapipe runs the 8 invocations as the SIMD lanes of one thread, where a barrier is a
// coroutine switch.
//
// Invocation (lane) i owns pair i: head HB * wid.x + i % HB, row RB * wid.y + i / HB, with its
// scaled query in registers (q slices: vec4 columns 8k .. 8k + 7 in slice k), its running max
// and denominator. lavapipe loads storage one lane at a time, so where the workgroup is one
// subgroup of 8 (ONYXIA_SUBGROUPS, checked at run time; lanes then numbered by
// subgroup_invocation_id) each K and V row is loaded once per workgroup: lane i loads vec4
// columns 8k + i and subgroupBroadcast hands them to the others; the accumulators are then held
// by column (acc slice k of lane c: pairs 0 .. 7 at vec4 column 8k + c) so that V needs no
// broadcast, only the pairs' weights do. Without (or with subgroups of another size) every lane
// loads every row and keeps its own pair's accumulators (acc slice k: its columns 8k .. 8k + 7).
// Measured on lavapipe (Mesa 22.3, 2 busy cores; H = 8, KVH = 4, D = 64, rotary; HB = 2) against
// gqa_attention.wgsl's 8-thread kernel: 64 rows ~5-7 ms -> ~0.45 ms, 14 rows ~0.6 -> ~0.15 ms,
// a decode step after 564 keys ~1.5-2.3 -> ~0.35-0.45 ms (benchmarks/bench_attention.py). Any
// array element indexed by a loop variable the driver does not unroll keeps the array in memory
// (1.5-2x slower): the per-slice work below is written out.
//
// Keys, masking, rotary, q/k-norm, softcap and float16 rounding are gqa_attention.wgsl's
// (attention::gqa_rows). Rows past S compute row S - 1 and store nothing.
// CPL = ceil(D / 32) slices (D <= 128: CPL <= 4; the planner keeps larger heads on
// gqa_attention.wgsl). The key walk is the only loop whose trips grow with the keys: one trip
// per QT keys (the slices' work is written out), so a split of KPS keys (attention::split;
// operators/attention/gqa.py) bounds them; the other loops run a few hundred trips at most.
// Buffers: as gqa_attention.wgsl. Defs: DIM, CPL, HB, ROTARY, INTERLEAVED, CAUSAL, WINDOW,
// SOFTCAP, QK_NORM, WINDOWED, ROUND_F16, SPLIT_KV, KPS, ONYXIA_SUBGROUPS (set at render).
// Params: as gqa_attention.wgsl.
#import attention::gqa_rows
#import attention::split
#import attention::flash

const LANES = 8u;  // (head, row) pairs per workgroup, one per invocation: one SIMD batch of lavapipe's lanes
const HB = #{HB}u;  // query heads per workgroup
const RB = LANES / HB;  // query rows per workgroup
const DV = #{DIM}u / 4u;  // vec4s per head row
const NEG = -3.0e38;  // "minus infinity" that keeps exp(m_old - m_new) free of inf - inf

// Query slice k of the row at `qrow` (position pos); columns past the head are 0. (Written out,
// as every access to the slices: one indexed by a loop variable that the driver does not unroll
// keeps the whole array in memory, measured 1.5-2x slower on lavapipe.)
fn query_slice(q: ptr<function, Slice>, k: u32, qrow: u32, inv: f32, pos: u32) {
    (*q)[0] = query_vec4(8u * k, qrow, inv, pos);
    (*q)[1] = query_vec4(8u * k + 1u, qrow, inv, pos);
    (*q)[2] = query_vec4(8u * k + 2u, qrow, inv, pos);
    (*q)[3] = query_vec4(8u * k + 3u, qrow, inv, pos);
    (*q)[4] = query_vec4(8u * k + 4u, qrow, inv, pos);
    (*q)[5] = query_vec4(8u * k + 5u, qrow, inv, pos);
    (*q)[6] = query_vec4(8u * k + 6u, qrow, inv, pos);
    (*q)[7] = query_vec4(8u * k + 7u, qrow, inv, pos);
}

fn query_vec4(c: u32, qrow: u32, inv: f32, pos: u32) -> vec4<f32> {
    if (c >= DV) {
        return vec4(0.0);
    }
    return vec4(query_element(qrow, 4u * c, inv, pos), query_element(qrow, 4u * c + 1u, inv, pos),
                query_element(qrow, 4u * c + 2u, inv, pos), query_element(qrow, 4u * c + 3u, inv, pos));
}

// Where the workgroup's pairs live: pair i is head h0 + i % HB, row s0 + i / HB of batch b.
struct Out {
    b: u32,
    h0: u32,
    s0: u32,
    sp: KeySplit,
}

fn store_vec4(o: Out, value: vec4<f32>, i: u32, k: u32, lane: u32, by_column: bool, scales: array<f32, 8>) {
    let pair = select(lane, i, by_column);
    let c = select(8u * k + i, 8u * k + lane, by_column);
    let h = o.h0 + pair % HB;
    let s = o.s0 + pair / HB;
    if (s >= S() || c >= DV) {
        return;
    }
    let y = value * scales[pair];
#ifdef SPLIT_KV
    if (split_partial()) {
        let at = split_at(o.sp, (o.b * H() + h) * S() + s) + 2u + 4u * c;
        for (var e = 0u; e < 4u; e++) {
            partial_store(at + e, y[e]);
        }
        return;
    }
#endif
    let at = (o.b * S() + s) * (H() * D()) + h * D() + 4u * c;
    for (var e = 0u; e < 4u; e++) {
        output_store(at + e, output_t(y[e]));
    }
}

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32
#ifdef ONYXIA_SUBGROUPS
        , @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_id: u32
#endif
        ) {
    var lanes_share = false;
    var lane = lid;
#ifdef ONYXIA_SUBGROUPS
    // the workgroup is one subgroup: its lanes share what they load (numbered as the subgroup
    // numbers them, for subgroupBroadcast); known to be where ONYXIA_SUBGROUPS_OF_8
    lanes_share = sg_size == LANES;
#ifdef ONYXIA_SUBGROUPS_OF_8
    lanes_share = true;
#endif
    if (lanes_share) {
        lane = sg_id;
    }
#endif
    let h0 = wid.x * HB;
    let h = h0 + lane % HB;
    let s0 = wid.y * RB;
    let sp = key_split(wid.z);
    let b = sp.b;
    let total_b = u32(max(seqlens_load(b) + 1, 0));
    let past = past_of(total_b);
    let s = min(s0 + lane / HB, S() - 1u);
    let pos = past + s;
    let mine = visible_keys(pos, total_b);
    // the workgroup's keys: from its first row's first to its last row's end
    let lo = visible_keys(past + s0, total_b).x;
    let hi = visible_keys(past + min(s0 + RB, S()) - 1u, total_b).y;
    gqa_rows_at(b, h0 / (H() / KVH()), past);

    // this row's query, [normalized,] rotated, scaled
    let qrow = (b * S() + s) * Q_ROW() + h * D();
    var q_inv = 1.0;
#ifdef QK_NORM
    var squares = 0.0;
    for (var d = 0u; d < D(); d++) {
        let x = f32(query_load(qrow + d));
        squares += x * x;
    }
    q_inv = 1.0 / sqrt(squares / f32(D()) + EPS());
#endif
    var q0: Slice;
    var acc0: Slice;
    query_slice(&q0, 0u, qrow, q_inv, pos);
#if CPL >= 2
    var q1: Slice;
    var acc1: Slice;
    query_slice(&q1, 1u, qrow, q_inv, pos);
#endif
#if CPL >= 3
    var q2: Slice;
    var acc2: Slice;
    query_slice(&q2, 2u, qrow, q_inv, pos);
#endif
#if CPL >= 4
    var q3: Slice;
    var acc3: Slice;
    query_slice(&q3, 3u, qrow, q_inv, pos);
#endif

    var st = RowState(NEG, 0.0);
    let first = split_lo(sp, lo, hi);
    let last = split_hi(sp, lo, hi);
    if (lanes_share) {
#ifdef ONYXIA_SUBGROUPS
        for (var j = first; j < last; j += 4u) {
            let keys = keys_from(j, last);
            var dots = qk_shared(&q0, lane_chunks(0u, lane, keys, false), mat4x4<f32>());
#if CPL >= 2
            dots = qk_shared(&q1, lane_chunks(1u, lane, keys, false), dots);
#endif
#if CPL >= 3
            dots = qk_shared(&q2, lane_chunks(2u, lane, keys, false), dots);
#endif
#if CPL >= 4
            dots = qk_shared(&q3, lane_chunks(3u, lane, keys, false), dots);
#endif
            var p: vec4<f32>;
            let alpha = softmax_step(&st, dots, vec4(0.0), (keys.at >= vec4(mine.x)) & (keys.at < vec4(min(mine.y, last))), &p);
            pv_shared(&acc0, lane_chunks(0u, lane, keys, true), alpha, p);
#if CPL >= 2
            pv_shared(&acc1, lane_chunks(1u, lane, keys, true), alpha, p);
#endif
#if CPL >= 3
            pv_shared(&acc2, lane_chunks(2u, lane, keys, true), alpha, p);
#endif
#if CPL >= 4
            pv_shared(&acc3, lane_chunks(3u, lane, keys, true), alpha, p);
#endif
        }
#endif
    } else {
#ifndef ONYXIA_SUBGROUPS_OF_8
        // (not compiled where the subgroup path always runs: it doubled the kernel's compile)
        for (var j = first; j < last; j += 4u) {
            let keys = keys_from(j, last);
            var dots = qk_plain(&q0, 0u, keys, mat4x4<f32>());
#if CPL >= 2
            dots = qk_plain(&q1, 1u, keys, dots);
#endif
#if CPL >= 3
            dots = qk_plain(&q2, 2u, keys, dots);
#endif
#if CPL >= 4
            dots = qk_plain(&q3, 3u, keys, dots);
#endif
            var p: vec4<f32>;
            let alpha = softmax_step(&st, dots, vec4(0.0), (keys.at >= vec4(mine.x)) & (keys.at < vec4(min(mine.y, last))), &p);
            pv_plain(&acc0, 0u, keys, alpha, p);
#if CPL >= 2
            pv_plain(&acc1, 1u, keys, alpha, p);
#endif
#if CPL >= 3
            pv_plain(&acc2, 2u, keys, alpha, p);
#endif
#if CPL >= 4
            pv_plain(&acc3, 3u, keys, alpha, p);
#endif
        }
#endif
    }

    // 1 / the denominator (0 for a row without a visible key: zeros, never NaN), or 1 for a
    // split's unnormalized partial state (m and l stored by the row's own lane)
    var scale = select(0.0, 1.0 / st.l, st.l > 0.0);
#ifdef SPLIT_KV
    if (split_partial()) {
        scale = 1.0;
        if (s0 + lane / HB < S()) {
            let at = split_at(sp, (b * H() + h) * S() + s);
            partial_store(at, st.m);
            partial_store(at + 1u, st.l);
        }
    }
#endif
    var scales: array<f32, 8>;
    scales[lane] = scale;
#ifdef ONYXIA_SUBGROUPS
    if (lanes_share) {
        scales = rows_of(scale);
    }
#endif
    let o = Out(b, h0, s0, sp);
    store_slice(o, &acc0, 0u, lane, lanes_share, scales);
#if CPL >= 2
    store_slice(o, &acc1, 1u, lane, lanes_share, scales);
#endif
#if CPL >= 3
    store_slice(o, &acc2, 2u, lane, lanes_share, scales);
#endif
#if CPL >= 4
    store_slice(o, &acc3, 3u, lane, lanes_share, scales);
#endif
}
