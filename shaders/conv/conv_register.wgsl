// Register-tiled direct convolution for CPU-type adapters (lavapipe): no shared memory, no
// barriers. An invocation computes RM output channels x RP consecutive output positions of one
// output row; its 8-lane workgroup (one SIMD batch of llvmpipe's 256-bit lanes) takes 8
// neighbouring row segments, and the workgroup's z index alone picks the channels: every weight
// address is uniform across the lanes. llvmpipe still loads it once per lane (Mesa 22.3 and 25
// alike: 8 vec4 loads a lane cost the same uniform or not), so where the device's subgroups hold
// the 8 lanes (ONYXIA_SUBGROUPS_OF_8) and the weights are k-major with KW > 1 (BODY_SG), each
// lane loads one of a kernel row's KW x RM/4 weight vec4s and subgroupBroadcast hands them round
// (3x3 64 -> 64 at 56x56, 8x28 tile: 10.0 -> 6.5 ms; 512 -> 512 at 7x7, 16x8: 15.5 -> 9.7 ms).
// Every input load is a per-lane access, the expensive kind on llvmpipe. So each loaded input value is used
// as often as possible: per input channel and kernel row, an invocation loads the row's span
// once (RP positions x KW taps, strided and dilated) and multiplies it into all RM channels for
// every tap along the row (operators/conv/cpu.py generates that unrolled body, BODY, and the
// named vec4 accumulators it uses, ACCS: an indexed accumulator array would spill). STORES
// stages them in a private array for one store loop (unrolled stores compile for seconds).
// Pointwise convolutions come here as 1-D rows of P positions (the planner flattens the space).
// Depthwise ones have RM = MG (1 per group): input reuse along a row is all there is to gain.
// Trip counts are bounded by construction: an invocation walks at most CCHUNK input channels x
// KD x KH kernel rows (<= operators/conv/cpu.py MAX_ROWS_PER_INVOCATION); more channels are
// split (SPLIT: partial sums to `partial` [SPLITS, TOTAL] in y's layout, summed with the bias by
// matmul/splitk.wgsl). The fused epilogue (EPILOGUE*, matmul::epilogue) runs in the store loop
// on each value as stored where EPILOGUE_IN_STORE (f32 output; else over the stored outputs) (column n = ow; EOW: the output's last axis as the graph sees it): a
// pass over the stored outputs after it (load, ops, store) cost each output two more per-lane
// memory accesses, the expensive kind on llvmpipe (a loop over the lanes per component).
// With X_SCALE, input channel c of image n is scaled by xscale[n * XSCALE_BS + c] (a
// squeeze-excite gate, operators/conv/scale.py): `cs`, which the BODY multiplies into each
// input vec4 it builds.
// Buffers: x, w, [bias], [xscale], [e0, e1, ...], y (partial with SPLIT). Defs: RM, RP, ACCS, BODY,
// STORES, X4 (x read as vec4s: IW % 4 == 0), HAS_BIAS, SPLIT, X_SCALE, STORE4 (y float32, a vec4 binding), EPILOGUE*. Params: NSEG (= N * OROWS * SEGS), SEGS (= ceil(OW / RP)),
// OROWS (= OD * OH), RBLOCKS, CCHUNK, SPLITS, TOTAL (= N * M * P), XSCALE_BS, EOW and conv::window's.
#import common::grid
#import matmul::epilogue
#import conv::row_loads

const RM = #{RM}u;
const RP = #{RP}u;
const QUADS = RP / 4u;

// The invocation's RM x QUADS accumulators, staged for the store loop (STORES writes them):
// in a private array where the driver compiles one indexed at run time as such (Mesa 25's
// lavapipe: from workgroup memory it stores each lane's vec4s one lane at a time, ~0.9 s of a
// 16 x 16 tile's 1.7 s compile), else in workgroup memory, each lane its own slots (Mesa 22.3
// lowers the indexed private array to branch ladders: 3.1-3.6 s against 0.45; device.py).
#ifdef ONYXIA_INDEXED_PRIVATE
var<private> stage: array<vec4<f32>, RM * QUADS>;
fn stage_slot(i: u32, lane: u32) -> u32 {
    return i;
}
#else
var<workgroup> stage: array<vec4<f32>, 8u * RM * QUADS>;
fn stage_slot(i: u32, lane: u32) -> u32 {
    return i * 8u + lane;
}
#endif

struct Site {
    s: u32,  // K split
    y0: u32,  // flat output index of (image, channel m0 + 0, position 0 of the segment)
    count: u32,  // positions of the segment inside the row (0: a surplus invocation)
    m0: u32,  // first output channel of the block, within the group
    oc0: u32,  // its channel index
    ow0: u32,  // first output column
}

// `b`: channel r's bias (HAS_BIAS), loaded once for its row of outputs: a load in here would be
// one per output, per lane (llvmpipe does not merge the same address loaded again).
fn put(site: Site, r: u32, q: u32, b: f32, v: vec4<f32>) {
    if (site.m0 + r >= MG()) {
        return;
    }
#ifdef SPLIT
    for (var j = 0u; j < 4u; j++) {
        let pos = 4u * q + j;
        if (pos < site.count) {
            partial_store(site.s * TOTAL() + site.y0 + r * P() + pos, v[j]);
        }
    }
#else
    let o0 = site.y0 + r * P() + 4u * q;
    var w = vec4<f32>();
    for (var j = 0u; j < 4u; j++) {
#ifdef HAS_BIAS
        let stored = y_t(v[j] + b);
#else
        let stored = y_t(v[j]);
#endif
#ifdef EPILOGUE_IN_STORE
        // the fused ops over the value as stored, as the unfused plan computes them
        w[j] = f32(y_t(matmul_epilogue(f32(stored), o0 + j, (site.ow0 + 4u * q + j) % EOW())));
#else
        w[j] = f32(stored);
#endif
    }
#ifdef STORE4
    // a whole quad at an aligned index: one vec4 store (llvmpipe pays per store and lane: a
    // pointwise 16 -> 64 conv at 112x112 1.37 -> 1.21 ms)
    if (4u * q + 3u < site.count && o0 % 4u == 0u) {
        y_store4(o0 / 4u, w);
        return;
    }
#endif
    for (var j = 0u; j < 4u; j++) {
        if (4u * q + j < site.count) {
            y_store(o0 + j, y_t(w[j]));
        }
    }
#endif
}

@compute @workgroup_size(8)
fn main(wg: Grid
#ifdef ONYXIA_SUBGROUPS_OF_8
#ifdef BODY_SG
        , @builtin(subgroup_invocation_id) sg_id: u32
#endif
#endif
        ) {
    let seg_id = grid_group(wg) * 8u + wg.lid;
    let seg = min(seg_id, NSEG() - 1u);
    let s = wg.wid.z % SPLITS();
    let z = wg.wid.z / SPLITS();
    let g = z / RBLOCKS();
    let m0 = (z % RBLOCKS()) * RM;
    let per_image = OROWS() * SEGS();
    let n = seg / per_image;
    let orow = (seg % per_image) / SEGS();
    let ow0 = (seg % SEGS()) * RP;
    let od = orow / OH();
    let oh = orow % OH();
    var count = min(RP, OW() - ow0);
    if (seg_id >= NSEG()) {
        count = 0u;
    }
    let site = Site(s, (n * M() + g * MG() + m0) * P() + orow * OW() + ow0, count, m0, g * MG() + m0, ow0);
    let iz0 = i32(od * SD()) - PD();
    let iy0 = i32(oh * SH()) - PH();
    let xs = i32(ow0 * SW()) - PW();
    let c_begin = s * CCHUNK();
    let c_end = min(CG(), c_begin + CCHUNK());
    let xbase = (n * C() + g * CG()) * ISP();
    // Weight rows of the block, clamped to the group's last (uniform: z and loop counters only).
    let wg_row = g * MG();
    #{ACCS}
#ifdef ONYXIA_SUBGROUPS_OF_8
#ifdef BODY_SG
    #{ACCS_SG}  // each lane's weight vec4 of a kernel row (wo0, wo1, ..)
#endif
#endif
    for (var c = c_begin; c < c_end; c++) {
        let xc = xbase + c * ISP();
#ifdef X_SCALE
        let cs = f32(xscale_load(n * XSCALE_BS() + g * CG() + c));
#endif
        let wc = c * KS();
        for (var kd = 0u; kd < KD(); kd++) {
            let iz = iz0 + i32(kd * DD());
            let zok = u32(iz) < ID();
            for (var kh = 0u; kh < KH(); kh++) {
#ifdef ONYXIA_SUBGROUPS_OF_8
#ifdef BODY_SG
                #{BODY_SG}  // the weights one vec4 a lane, subgroupBroadcast to all
#else
                #{BODY}
#endif
#else
                #{BODY}  // from input row iy0 + kh * DH: its loads, then every tap along it
#endif
            }
        }
    }
    #{STORES}
    let nq = (count + 3u) / 4u;
    let nr = min(RM, MG() - min(MG(), m0));
    for (var r = 0u; r < nr; r++) {
#ifdef HAS_BIAS
        let b = f32(bias_load(site.oc0 + r));
#else
        let b = 0.0;
#endif
        for (var q = 0u; q < nq; q++) {
            put(site, r, q, b, stage[stage_slot(r * QUADS + q, wg.lid)]);
        }
    }
#ifdef EPILOGUE
#ifndef EPILOGUE_IN_STORE
    // where the ops cannot run in the store (float16 storage: matmul/epilogue.py in_store)
    for (var r = 0u; r < RM && m0 + r < MG(); r++) {
        for (var j = 0u; j < count; j++) {
            matmul_epilogue_at(site.y0 + r * P() + j, (ow0 + j) % EOW());
        }
    }
#endif
#endif
}
