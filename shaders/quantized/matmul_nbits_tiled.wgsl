// MatMulNBits (4-bit) for many rows (prefill): y = a @ w^T (+ bias), w dequantized per tile.
//
// A workgroup computes a 64 x 64 tile of y (rows wid.y, columns wid.x); each thread owns a
// 4 x 4 block. K advances 16 at a time: the A tile (64 x 16) and the dequantized B tile
// (16 x 64; two 32-bit words per column) are staged in shared memory. Tiles of 16 never straddle
// a quantization block (block sizes are powers of two >= 16): one scale/zero point per column.
// Buffers, defs and params: as matmul_nbits_gemv.wgsl (a is read one element at a time).
#import quantized::nbits
#import quantized::nbits_index
#import quantized::epilogue

const TM = 64u;
const TN = 64u;
const TK = 16u;

var<workgroup> a_tile: array<f32, 1024>;  // [TM][TK]
var<workgroup> b_tile: array<f32, 1024>;  // [TK][TN]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tx = lid % 16u;
    let ty = lid / 16u;
    let n0 = wid.x * TN;
    let m0 = wid.y * TM;
    var acc: array<f32, 16>;
    let tiles = (K() + TK - 1u) / TK;
    for (var t = 0u; t < tiles; t++) {
        let k0 = t * TK;
        for (var e = lid; e < TM * TK; e += 256u) {
            let m = m0 + e / TK;
            let k = k0 + e % TK;
            var v = 0.0;
            if (m < M() && k < K()) {
                v = f32(a_load(m * K() + k));
            }
            a_tile[e] = v;
        }
        if (lid < 2u * TN) {
            let c = lid / 2u;
            let kk = (lid % 2u) * 8u;
            let n = n0 + c;
            var word = 0u;
            var scale = 0.0;
            var zero = 0.0;
            if (n < N()) {
                // B rows are padded to whole blocks, so this word exists even past K
                word = b_word(b_index(n, (k0 + kk) / 8u));
                let blk = k0 / BLOCK();
                scale = f32(scales_load(scale_index(n, blk)));
                zero = zero_point(n, blk);
            }
            for (var j = 0u; j < 8u; j++) {
                b_tile[(kk + j) * TN + c] = (f32((word >> (4u * j)) & 15u) - zero) * scale;
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                av[i] = a_tile[(ty * 4u + i) * TK + kk];
                bv[i] = b_tile[kk * TN + tx * 4u + i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + ty * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tx * 4u + j;
            if (m < M() && n < N()) {
                var v = acc[i * 4u + j];
                v = nbits_epilogue(v, m, n);
                y_store(m * N() + n, y_t(v));
            }
        }
    }
}
