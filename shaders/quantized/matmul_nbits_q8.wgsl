// MatMulNBits accuracy_level 4, step 2: y[m, n] = sum over blocks of sa[m, blk] * scale[n, blk] *
// sum_k qa[m, k] * (q[n, k] - zero_point[n, blk]) (+ bias[n]), an integer dot per word of B, as
// onnxruntime's CPU kernel computes it (int8 activations from quantize_q8.wgsl, int4 weights).
//
// Layout as matmul_nbits_gemv.wgsl: a workgroup owns COLS columns and ROWS rows (wid.z); the LANES
// threads of a column walk row n of B a word (8 weights, one block) at a time; a shared-memory tree
// reduction adds the lanes. The 8 weights of a word become two words of 4 signed bytes
// (q - zero_point in [-15, 15]) for dot4I8Packed, WGSL's packed 4x8 integer dot product (naga
// lowers it to the device's dot-product instruction where there is one); with PLAIN_DOT the bytes
// are multiplied one by one instead.
// Buffers: qa (int8, read a word at a time), sa, b, scales, [zp], [bias], y.
// Defs: ZP_PACKED / ZP_FLOAT, HAS_BIAS, PLAIN_DOT, TILED (quantized::nbits_index). Params: M, N, BLOCK,
// NBLK, ROW_WORDS, ZP_ROW.
#import quantized::nbits
#import quantized::nbits_index
#import quantized::epilogue
#import common::grid

const COLS = 8u;
const LANES = 32u;
const ROWS = 4u;

var<workgroup> red: array<f32, 1024>;  // ROWS x 256 partial sums

fn dot4(x: u32, y: u32) -> i32 {
#ifdef PLAIN_DOT
    var sum = 0;
    for (var j = 0u; j < 4u; j++) {
        // sign-extend byte j of each word
        sum += (bitcast<i32>(x << (24u - 8u * j)) >> 24u) * (bitcast<i32>(y << (24u - 8u * j)) >> 24u);
    }
    return sum;
#else
    return dot4I8Packed(x, y);
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let lid = wg.lid;
    let col = lid / LANES;
    let lane = lid % LANES;
    let n = grid_group(wg) * COLS + col;
    let m0 = wg.wid.z * ROWS;
    let a_words = NBLK() * BLOCK() / 4u;  // int8 words per row of qa (K padded to whole blocks)
    var acc: array<f32, ROWS>;
    if (n < N()) {
        for (var w = lane; w < ROW_WORDS(); w += LANES) {
            let word = b_word(b_index(n, w));
            let blk = (w * 8u) / BLOCK();
            let zero = i32(zero_point(n, blk));
            let scale = f32(scales_load(scale_index(n, blk)));
            var lo = 0u;
            var hi = 0u;
            for (var j = 0u; j < 4u; j++) {
                lo |= (u32(i32((word >> (4u * j)) & 15u) - zero) & 255u) << (8u * j);
                hi |= (u32(i32((word >> (4u * j + 16u)) & 15u) - zero) & 255u) << (8u * j);
            }
            for (var r = 0u; r < ROWS; r++) {
                let m = m0 + r;
                if (m < M()) {
                    let dot = dot4(qa_word(m * a_words + 2u * w), lo) + dot4(qa_word(m * a_words + 2u * w + 1u), hi);
                    acc[r] += (sa_load(m * NBLK() + blk) * scale) * f32(dot);
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
