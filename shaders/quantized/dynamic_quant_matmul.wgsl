// onyxia::DynamicQuantMatMul (passes/dynamic_quant_fusion.py): transformers.js' q8 chain
// DynamicQuantizeLinear(x) -> MatMulInteger(q, B, zp, B_zp) -> Cast(float) -> Mul(a_scale * B_scale)
// in one kernel, as onnxruntime computes each step:
//   lo = min(0, min x), hi = max(0, max x) over the whole of x (every row: the scale is per tensor),
//   scale = (hi - lo) / 255 (1 when hi == lo), zp = round_half_even(clamp(-lo / scale, 0, 255)),
//   q[m, k] = clamp(round_half_even(x[m, k] / scale) + zp, 0, 255)             (uint8),
//   acc[m, n] = sum_k (q[m, k] - zp) * (B[k, n] - B_zp[n])                      (exact in i32),
//   y[m, n] = f32(acc[m, n]) * (scale * B_scale[n]).
// acc is taken as sum_k q' B[k, n] - B_zp[n] * sum_k q' (q' = q - zp): the same integer.
// Each workgroup first reduces x's range itself (every thread strides over x: M K / WG loads;
// the planner uses this for one row) or, with RANGE_IN, the partial ranges of dynamic_range.wgsl.
// Threads own WORDS words of B's row (4 columns a word, B [K, N] int8 / uint8 stored 4 to a u32)
// and ROWS rows (wid.z). With STAGED (the GPU-type variant) the workgroup quantizes a tile of
// 4 WG values of its rows into workgroup memory, the threads then read it; without (CPU-type:
// no barriers in the loop over K) each thread quantizes the values it multiplies itself.
// A thread's loop over K runs K times (the pass fuses K <= MAX_K, keeping it below lavapipe's
// ~65,535 iterations), its range loop M K / WG (or GROUPS / WG) times.
// Then the fused elementwise ops after the product, if any (quantized::epilogue).
// Buffers: x (f32 [M, K]), b (int8 / uint8 [K, N]), bs (f32: 1 or N), [bz] (int8 / uint8: 1 or N),
// [range] (f32 [GROUPS, 2]), [e0, e1, ...: epilogue operands], y (f32 [M, N]).
// Defs: WG, WORDS, ROWS, SIGNED_B, BS_COLS, HAS_BZ, BZ_COLS, RANGE_IN, STAGED, EPILOGUE*.
// Params: M, K, N (a multiple of 4), [GROUPS].
#import common::grid
#import quantized::epilogue
#import quantized::range

const WG = #{WG}u;
const WORDS = #{WORDS}u;
const ROWS = #{ROWS}u;
const TILE = 4u * WG;

#ifdef STAGED
var<workgroup> tile: array<i32, ROWS * TILE>;
#endif

struct Quant {
    scale: f32,
    zp: f32,
}

// DynamicQuantizeLinear's scale and zero point from x's range (every thread gets them).
fn quantization(lid: u32) -> Quant {
    var lo = 0.0;
    var hi = 0.0;
#ifdef RANGE_IN
    for (var g = lid; g < GROUPS(); g += WG) {
        lo = min(lo, range_load(2u * g));
        hi = max(hi, range_load(2u * g + 1u));
    }
#else
    let total = M() * K();
    for (var i = lid; i < total; i += WG) {
        let v = f32(x_load(i));
        lo = min(lo, v);
        hi = max(hi, v);
    }
#endif
    let both = workgroup_range(lid, lo, hi);
    let l = both.x;
    let h = both.y;
    let scale = select((h - l) / 255.0, 1.0, h == l);
    return Quant(scale, round(clamp(0.0 - l / scale, 0.0, 255.0)));
}

// x[m, k] quantized, minus the zero point (0 for a row past M).
fn quantized(q: Quant, m: u32, k: u32) -> i32 {
    if (m >= M()) {
        return 0;
    }
    let v = clamp(round(f32(x_load(m * K() + k)) / q.scale) + q.zp, 0.0, 255.0);
    return i32(v) - i32(q.zp);
}

// The 4 bytes of a word of B as integers (low byte first).
fn bytes(word: u32) -> vec4<i32> {
#ifdef SIGNED_B
    return bitcast<vec4<i32>>(vec4<u32>(word) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
#else
    return vec4<i32>((vec4<u32>(word) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
#endif
}

fn b_scale(n: u32) -> f32 {
#ifdef BS_COLS
    return f32(bs_load(n));
#else
    return f32(bs_load(0u));
#endif
}

fn b_zero(n: u32) -> i32 {
#ifdef HAS_BZ
#ifdef BZ_COLS
    return i32(bz_load(n));
#else
    return i32(bz_load(0u));
#endif
#else
    return 0;
#endif
}

@compute @workgroup_size(#{WG})
fn main(wg: Grid) {
    let lid = wg.lid;
    let q = quantization(lid);
    let nw = N() / 4u;  // words per row of B
    let w0 = (grid_group(wg) * WG + lid) * WORDS;  // this thread's first word of a row
    let m0 = wg.wid.z * ROWS;
    var acc: array<vec4<i32>, ROWS * WORDS>;
    var sums: array<i32, ROWS>;
#ifdef STAGED
    for (var k0 = 0u; k0 < K(); k0 += TILE) {
        for (var r = 0u; r < ROWS; r++) {
            for (var j = 0u; j < 4u; j++) {
                let t = 4u * lid + j;
                tile[r * TILE + t] = select(0, quantized(q, m0 + r, k0 + t), k0 + t < K());
            }
        }
        workgroupBarrier();
        let count = min(TILE, K() - k0);
        for (var t = 0u; t < count; t++) {
            var qv: array<i32, ROWS>;
            for (var r = 0u; r < ROWS; r++) {
                qv[r] = tile[r * TILE + t];
                sums[r] += qv[r];
            }
            let row = (k0 + t) * nw;
            for (var w = 0u; w < WORDS; w++) {
                let bv = bytes(b_word(row + min(w0 + w, nw - 1u)));
                for (var r = 0u; r < ROWS; r++) {
                    acc[r * WORDS + w] += qv[r] * bv;
                }
            }
        }
        workgroupBarrier();
    }
#else
    for (var k = 0u; k < K(); k++) {
        var qv: array<i32, ROWS>;
        for (var r = 0u; r < ROWS; r++) {
            qv[r] = quantized(q, m0 + r, k);
            sums[r] += qv[r];
        }
        let row = k * nw;
        for (var w = 0u; w < WORDS; w++) {
            let bv = bytes(b_word(row + min(w0 + w, nw - 1u)));
            for (var r = 0u; r < ROWS; r++) {
                acc[r * WORDS + w] += qv[r] * bv;
            }
        }
    }
#endif
    for (var w = 0u; w < WORDS; w++) {
        if (w0 + w < nw) {
            for (var j = 0u; j < 4u; j++) {
                let n = 4u * (w0 + w) + j;
                let factor = q.scale * b_scale(n);
                for (var r = 0u; r < ROWS; r++) {
                    let m = m0 + r;
                    if (m < M()) {
                        let total = acc[r * WORDS + w][j] - b_zero(n) * sums[r];
                        y_store(m * N() + n, nbits_epilogue(f32(total) * factor, m, n));
                    }
                }
            }
        }
    }
}
