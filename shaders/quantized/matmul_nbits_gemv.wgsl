// MatMulNBits (4-bit) for few rows, the decode case: y[m, n] = sum_k a[m, k] * w[n, k] (+ bias[n])
// with w[n, k] = (q[n, k] - zero_point[n, blk]) * scale[n, blk], blk = k / BLOCK, dequantized in
// registers (the weights stay packed in device memory).
//
// A workgroup owns COLS output columns and ROWS rows of A (wid.z). The LANES threads of a column
// walk row n of B one 32-bit word (8 weights) at a time, adjacent lanes reading adjacent words
// (coalesced); each dequantized word serves all ROWS rows. Partial sums meet in a shared-memory
// tree reduction. Block sizes are >= 16, so the 8 weights of a word share one block.
// Buffers: a (read as vec4 unless K_TAIL), b, scales, [zp], [bias], y; computed in f32.
// Defs: ZP_PACKED / ZP_FLOAT, HAS_BIAS, EPILOGUE (quantized/epilogue.wgsl), K_TAIL (K % 8 != 0), TILED
// (quantized::nbits_index). Params: M, N, K, BLOCK, NBLK, ROW_WORDS (words per row of B),
// KWORDS (words covering K), ZP_ROW (zero-point bytes per row).
#import common::grid
#import quantized::nbits
#import quantized::nbits_index
#import quantized::epilogue

const COLS = 8u;
const LANES = 32u;
const ROWS = 4u;

var<workgroup> red: array<f32, 1024>;  // ROWS x 256 partial sums

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let lid = wg.lid;
    let col = lid / LANES;
    let lane = lid % LANES;
    let n = grid_group(wg) * COLS + col;
    let m0 = wg.wid.z * ROWS;
    var acc: array<f32, ROWS>;
    if (n < N()) {
        for (var w = lane; w < KWORDS(); w += LANES) {
            let word = b_word(b_index(n, w));
            let k0 = w * 8u;
            let blk = k0 / BLOCK();
            let scale = f32(scales_load(scale_index(n, blk)));
            let zero = zero_point(n, blk);
            var wv: array<f32, 8>;
            for (var j = 0u; j < 8u; j++) {
                wv[j] = (f32((word >> (4u * j)) & 15u) - zero) * scale;
            }
            for (var r = 0u; r < ROWS; r++) {
                let m = m0 + r;
                if (m < M()) {
#ifdef K_TAIL
                    let base = m * K() + k0;
                    var sum = 0.0;
                    for (var j = 0u; j < 8u; j++) {
                        if (k0 + j < K()) {
                            sum += f32(a_load(base + j)) * wv[j];
                        }
                    }
                    acc[r] += sum;
#else
                    // K % 8 == 0: a is read as vec4s, two loads per word
                    let base = (m * K() + k0) / 4u;
                    let lo = vec4<f32>(a_load4(base)) * vec4(wv[0], wv[1], wv[2], wv[3]);
                    let hi = vec4<f32>(a_load4(base + 1u)) * vec4(wv[4], wv[5], wv[6], wv[7]);
                    let sum = lo + hi;
                    acc[r] += sum.x + sum.y + sum.z + sum.w;
#endif
                }
            }
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        red[r * 256u + lid] = acc[r];
    }
    workgroupBarrier();
    for (var stride = LANES / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            for (var r = 0u; r < ROWS; r++) {
                red[r * 256u + lid] += red[r * 256u + lid + stride];
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u && n < N()) {
        for (var r = 0u; r < ROWS; r++) {
            let m = m0 + r;
            if (m < M()) {
                var v = red[r * 256u + lid];
                v = nbits_epilogue(v, m, n);
                y_store(m * N() + n, y_t(v));
            }
        }
    }
}
