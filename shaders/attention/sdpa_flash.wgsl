// FusedAttention on a CPU-type adapter, flash-style: softmax(scale * q k^T + mask) v with a
// workgroup of 8 invocations per 8 consecutive query rows of one (batch, head), grid (H,
// ceil(S / 8), B). The workgroup walks the keys once, 4 a step, each invocation its own row's
// scaled query, online softmax and accumulators (attention::flash, shared with gqa_flash.wgsl):
// where the workgroup is one subgroup of 8 each K and V row is loaded once per workgroup and
// handed round by subgroupBroadcast instead of once per lane (lavapipe loads storage one lane at
// a time), and no scores reach memory. Operands are read through the views' element strides
// (operators/attention/fused.py; every stride a multiple of the head size, itself a multiple of
// 4, so rows start on a vec4). A key whose float mask entry is -inf (or at most NEG, the float
// minimum torch's masks use) is skipped for its row; a row without a live key outputs zeros.
// Rows past S compute row S - 1 and store nothing. The key walk is the only loop whose trips
// grow with the keys (T / 4; the planner bounds T).
// Buffers: q, k, v (vec4), [mask], y. Defs: DIM (= D = DV, at most 128), CPL (= ceil(D / 32)),
// MASK_FLOAT, ONYXIA_SUBGROUPS (set at render). Params: H, S, T, SCALE, MT, element strides
// QB/QH/QS, KB/KH/KS, VB/VH/VS, YB/YH/YS, MB/MH/MS; with OFFSETS (a def) Q0, K0, V0.
#import attention::flash
#import attention::operands


const LANES = 8u;  // query rows per workgroup, one per invocation: one SIMD batch of lavapipe's lanes
const DV = #{DIM}u / 4u;  // vec4s per head row
const NEG = -3.0e38;

var<private> kbase: u32;  // element offset of this (batch, head)'s keys in k
var<private> vbase: u32;

fn key4(j: u32, c: u32) -> vec4<f32> {
    return vec4<f32>(k_load4((kbase + j * KS()) / 4u + c));
}

fn value4(j: u32, c: u32) -> vec4<f32> {
    return vec4<f32>(v_load4((vbase + j * VS()) / 4u + c));
}

// Query slice k of the row starting at vec4 `qrow4`, scaled; columns past the head are 0
// (written out: see attention::flash).
fn query_slice(q: ptr<function, Slice>, k: u32, qrow4: u32) {
    (*q)[0] = query_vec4(8u * k, qrow4);
    (*q)[1] = query_vec4(8u * k + 1u, qrow4);
    (*q)[2] = query_vec4(8u * k + 2u, qrow4);
    (*q)[3] = query_vec4(8u * k + 3u, qrow4);
    (*q)[4] = query_vec4(8u * k + 4u, qrow4);
    (*q)[5] = query_vec4(8u * k + 5u, qrow4);
    (*q)[6] = query_vec4(8u * k + 6u, qrow4);
    (*q)[7] = query_vec4(8u * k + 7u, qrow4);
}

fn query_vec4(c: u32, qrow4: u32) -> vec4<f32> {
    if (c >= DV) {
        return vec4(0.0);
    }
    return vec4<f32>(q_load4(qrow4 + c)) * SCALE();
}

// The mask's addition to the step's four scores of the row whose mask row starts at `mrow`;
// clears `live` where the mask is -inf (or the float minimum) or past its MT keys.
fn mask_bias(mrow: u32, keys: Keys, live: ptr<function, vec4<bool>>) -> vec4<f32> {
#ifdef MASK_FLOAT
    let mk = min(keys.row, vec4<u32>(MT() - 1u));
    let bias = vec4<f32>(f32(mask_load(mrow + mk.x)), f32(mask_load(mrow + mk.y)), f32(mask_load(mrow + mk.z)),
                         f32(mask_load(mrow + mk.w)));
    *live = *live & (keys.row < vec4<u32>(MT())) & (bias > vec4<f32>(NEG));
    return select(vec4<f32>(0.0), bias, *live);
#else
    return vec4<f32>(0.0);
#endif
}

// Where the workgroup's rows live: row s0 + i of head h, batch b.
struct Out {
    b: u32,
    h: u32,
    s0: u32,
}

fn store_vec4(o: Out, value: vec4<f32>, i: u32, k: u32, lane: u32, by_column: bool, scales: array<f32, 8>) {
    let row = select(lane, i, by_column);
    let c = select(8u * k + i, 8u * k + lane, by_column);
    let s = o.s0 + row;
    if (s >= S() || c >= DV) {
        return;
    }
    let y = value * scales[row];
    let at = o.b * YB() + o.h * YH() + s * YS() + 4u * c;
    for (var e = 0u; e < 4u; e++) {
        y_store(at + e, y_t(y[e]));
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
    let h = wid.x;
    let s0 = wid.y * LANES;
    let b = wid.z;
    let s = min(s0 + lane, S() - 1u);
    let offs = operand_offsets();
    kbase = b * KB() + h * KH() + offs.y;
    vbase = b * VB() + h * VH() + offs.z;
    let qrow4 = (b * QB() + h * QH() + s * QS() + offs.x) / 4u;
    let mrow = b * MB() + h * MH() + s * MS();
    var q0: Slice;
    var acc0: Slice;
    query_slice(&q0, 0u, qrow4);
#if CPL >= 2
    var q1: Slice;
    var acc1: Slice;
    query_slice(&q1, 1u, qrow4);
#endif
#if CPL >= 3
    var q2: Slice;
    var acc2: Slice;
    query_slice(&q2, 2u, qrow4);
#endif
#if CPL >= 4
    var q3: Slice;
    var acc3: Slice;
    query_slice(&q3, 3u, qrow4);
#endif

    var st = RowState(NEG, 0.0);
    let last = T();
    if (lanes_share) {
#ifdef ONYXIA_SUBGROUPS
        for (var j = 0u; j < last; j += 4u) {
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
            var live = keys.at < vec4(last);
            let bias = mask_bias(mrow, keys, &live);
            var p: vec4<f32>;
            let alpha = softmax_step(&st, dots, bias, live, &p);
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
        for (var j = 0u; j < last; j += 4u) {
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
            var live = keys.at < vec4(last);
            let bias = mask_bias(mrow, keys, &live);
            var p: vec4<f32>;
            let alpha = softmax_step(&st, dots, bias, live, &p);
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

    // 1 / the denominator (0 for a row without a live key: zeros, never NaN)
    let scale = select(0.0, 1.0 / st.l, st.l > 0.0);
    var scales: array<f32, 8>;
    scales[lane] = scale;
#ifdef ONYXIA_SUBGROUPS
    if (lanes_share) {
        scales = rows_of(scale);
    }
#endif
    let o = Out(b, h, s0);
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
