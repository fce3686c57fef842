// DeformConv's two element kernels around a batched matrix product (operators/conv/deform.py):
//
// STAGE im2col: one thread per column element: cols[n, g, k, p] with k = (c, ki, kj) over the
//   group's CG channels and the kernel taps, p = (oh, ow), is x[n, g * CG + c] sampled
//   bilinearly at the tap's place moved by its offset (corners outside the image read 0, as
//   GridSample with zeros padding and align_corners), times the tap's mask.
// STAGE bias: y[n, m, p] += b[m] (grouped products have no per-row epilogue).
//
// Buffers: x, offset (and mask) in, the f32 scratch cols out; bias: b in, y read-write.
// Defs: STAGE, HAS_MASK. Params: TOTAL, C, CG, G (group), OGC (channels per offset
// group), H, W, KH, KW, OH, OW, SH, SW, DH, DW, PH, PW (i32 pads), and for bias M, P.
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
#if STAGE == im2col
    let p_count = OH() * OW();
    let taps = KH() * KW();
    let p = i % p_count;
    let k = (i / p_count) % (CG() * taps);
    let g = (i / (p_count * CG() * taps)) % G();
    let n = i / (p_count * CG() * taps * G());
    let c = g * CG() + k / taps;
    let tap = k % taps;
    let ki = tap / KW();
    let kj = tap % KW();
    let oh = p / OW();
    let ow = p % OW();
    let og = c / OGC();
    let groups = C() / OGC();
    // offset [N, groups * taps * 2, OH, OW] (y then x per tap); mask [N, groups * taps, OH, OW]
    let off = ((n * groups + og) * taps + tap) * 2u;
    let dy = f32(offset_load((off * OH() + oh) * OW() + ow));
    let dx = f32(offset_load(((off + 1u) * OH() + oh) * OW() + ow));
    let y = f32(i32(oh * SH() + ki * DH()) - PH()) + dy;
    let xx = f32(i32(ow * SW() + kj * DW()) - PW()) + dx;
    // Far outside the image every tap reads 0: clamping keeps the integer casts in range.
    let y0 = clamp(floor(y), -2.0, f32(H()) + 1.0);
    let x0 = clamp(floor(xx), -2.0, f32(W()) + 1.0);
    let fy = y - y0;
    let fx = xx - x0;
    let plane = (n * C() + c) * H() * W();
    var v = 0.0;
    for (var t = 0u; t < 4u; t++) {
        let yi = i32(y0) + i32(t / 2u);
        let xi = i32(x0) + i32(t % 2u);
        if (yi >= 0 && yi < i32(H()) && xi >= 0 && xi < i32(W())) {
            let wy = select(1.0 - fy, fy, t / 2u == 1u);
            let wx = select(1.0 - fx, fx, t % 2u == 1u);
            v += wy * wx * f32(x_load(plane + u32(yi) * W() + u32(xi)));
        }
    }
#ifdef HAS_MASK
    v *= f32(mask_load(((n * groups + og) * taps + tap) * p_count + p));
#endif
    cols_store(i, v);
#else
    y_store(i, y_load(i) + b_load((i / P()) % M()));
#endif
}
