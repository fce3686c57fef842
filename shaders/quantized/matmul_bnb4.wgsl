// com.microsoft MatMulBnb4 with B kept packed: y[m, n] = sum_k a[m, k] * w[n, k], where w is the
// [N, K] weight flattened (element j = n K + k) as two 4-bit codes a byte (the high nibble first)
// and w[j] = CODES[code j] * absmax[j / BLOCK] (bitsandbytes' FP4 or NF4 table: QUANT 0 / 1),
// rounded to A's dtype with HALF_W (float16 A), as onnxruntime dequantizes it.
// A word of B holds 8 codes of one column and one block (K and BLOCK multiples of 8, which
// operators/quantized/matmul_bnb4.py checks): a thread dequantizes it through the 16-entry
// table in registers and multiplies it with ROWS rows of a.
// Layout: a workgroup owns COLS columns; the LANES threads of a column take every LANES-th word
// of its K / 8 (a tree in workgroup memory adds them when LANES > 1). CPU-type variant: LANES 1
// (a thread streams its column's contiguous words); GPU-type: LANES 32 (coalesced words).
// A thread's loop runs K / (8 LANES) times (K <= 8 x 32768: below lavapipe's ~65,535).
// Then the fused elementwise ops after the product, if any (quantized::epilogue: float32 only).
// Buffers: a, b (uint8, read a word at a time), absmax, [e0, e1, ...: epilogue operands], y.
// Defs: QUANT, LANES, COLS, ROWS, HALF_W, EPILOGUE*.
// Params: M, N, K, BLOCK.
#import common::grid
#import quantized::epilogue

const LANES = #{LANES}u;
const COLS = #{COLS}u;
const ROWS = #{ROWS}u;

#if LANES > 1
var<workgroup> red: array<f32, ROWS * LANES * COLS>;
#endif

@compute @workgroup_size(#{LANES} * #{COLS})
fn main(wg: Grid) {
#if QUANT == 0
    var table = array<f32, 16>(0.0, 0.0052083333, 0.6666666667, 1.0, 0.3333333333, 0.5, 0.1666666667, 0.25,
                               -0.0, -0.0052083333, -0.6666666667, -1.0, -0.3333333333, -0.5, -0.1666666667, -0.25);
#else
    var table = array<f32, 16>(-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                               -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                               0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                               0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0);
#endif
    let lid = wg.lid;
    let col = lid / LANES;
    let lane = lid % LANES;
    let n = grid_group(wg) * COLS + col;
    let m0 = wg.wid.z * ROWS;
    let words = K() / 8u;
    var acc: array<f32, ROWS>;
    if (n < N()) {
        for (var w = lane; w < words; w += LANES) {
            let word = b_word(n * words + w);
            let scale = f32(absmax_load((n * K() + 8u * w) / BLOCK()));
            let k0 = 8u * w;
            for (var e = 0u; e < 8u; e++) {
                // element e: byte e / 2, its high nibble for even e
                let code = (word >> (8u * (e / 2u) + 4u * (1u - e % 2u))) & 15u;
                var v = table[code] * scale;
#ifdef HALF_W
                v = unpack2x16float(pack2x16float(vec2<f32>(v, 0.0))).x;
#endif
                for (var r = 0u; r < ROWS; r++) {
                    let m = min(m0 + r, M() - 1u);
                    acc[r] += f32(a_load(m * K() + k0 + e)) * v;
                }
            }
        }
    }
#if LANES > 1
    for (var r = 0u; r < ROWS; r++) {
        red[r * LANES * COLS + lid] = acc[r];
    }
    workgroupBarrier();
    for (var stride = LANES / 2u; stride > 0u; stride >>= 1u) {
        if (lane < stride) {
            for (var r = 0u; r < ROWS; r++) {
                red[r * LANES * COLS + lid] += red[r * LANES * COLS + lid + stride];
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < ROWS; r++) {
        acc[r] = red[r * LANES * COLS + lid];
    }
#endif
    if (lane == 0u && n < N()) {
        for (var r = 0u; r < ROWS; r++) {
            let m = m0 + r;
            if (m < M()) {
                y_store(m * N() + n, y_t(nbits_epilogue(acc[r], m, n)));
            }
        }
    }
}
