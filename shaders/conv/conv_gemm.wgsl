// Implicit-GEMM convolution: per group g (workgroup z), Y[MG, N*P] = W[MG, K] x patches[K, N*P],
// a tiled product (matmul::tile) whose B is never stored: each K-slice of a column tile is
// gathered from the input (im2col on the fly, conv::window) into shared memory. Tiles run along
// the output's spatial axis, so the stores coalesce.
// Every thread gathers the same column in every slice (TN divides 256), so its output position
// is decoded once, not per element.
// SPLIT: the reduction K = CG * kernel size is split in SPLITS ranges of KCHUNK (lavapipe stops an
// invocation's loops after ~65,535 iterations: 8192 channels x 3x3 taps is past that); workgroup
// z is (group * ROW_BLOCKS + row block) * SPLITS + split, partial sums go to `partial`
// [SPLITS, N * M * P] in y's layout, and matmul/splitk.wgsl adds them up and the bias once (the
// planner leaves HAS_BIAS off here).
// Buffers: x, w, [bias], [e0, e1, ...], y (partial with SPLIT). Defs: T (the compute type: f32 or i32), RM, RN,
// TRANSPOSED, HAS_BIAS, SPLIT, EPILOGUE* (fused ops after the stores, matmul::epilogue; with SPLIT in the finish).
// Params: M, ROW_BLOCKS and those of conv::window; SPLIT: SPLITS, KCHUNK.
#import common::grid
#import matmul::tile
#import conv::window
#import matmul::epilogue

alias TileValue = #{T};

struct TileSource {
    g: u32,       // the group
    col: Column,  // this thread's column, n0 + lid % TN: the n of every tile_b call it makes
}

fn tile_a(src: TileSource, m: u32, k: u32) -> #{T} {
    if (m < MG() && k < K()) {
        return conv_weight(src.g, m, k);
    }
    return #{T}(0);
}

fn tile_b(src: TileSource, k: u32, n: u32) -> #{T} {
    if (k < K()) {
        return conv_patch(src.col, k);
    }
    return #{T}(0);
}

fn tile_mac(acc: #{T}, a: #{T}, b: #{T}) -> #{T} {
    return acc + a * b;
}

@compute @workgroup_size(16, 16)
fn main(wg: Grid, @builtin(local_invocation_id) tid: vec3<u32>) {
    // z = group * ROW_BLOCKS + row block; column blocks run along x, folded into y by the
    // runtime when there are more than 65535 (surplus blocks see only columns >= NCOLS).
#ifdef SPLIT
    let s = wg.wid.z % SPLITS();
    let z = wg.wid.z / SPLITS();
    let k_begin = s * KCHUNK();
    let k_end = min(K(), k_begin + KCHUNK());
#else
    let z = wg.wid.z;
    let k_begin = 0u;
    let k_end = K();
#endif
    let g = z / ROW_BLOCKS();
    let m0 = (z % ROW_BLOCKS()) * TM;
    let n0 = grid_group(wg) * TN;
    let src = TileSource(g, conv_column(n0 + wg.lid % TN, g));
    let acc = tile_product(src, m0, n0, tid, wg.lid, k_begin, k_end);
    for (var r = 0u; r < RM; r++) {
        let gm = m0 + tid.y + 16u * r;
        if (gm >= MG()) {
            continue;
        }
        let oc = g * MG() + gm;
#ifdef HAS_BIAS
        let b = #{T}(bias_load(oc));
#else
        let b = #{T}(0);
#endif
        for (var q = 0u; q < RN; q++) {
            let gn = n0 + tid.x + 16u * q;
            if (gn < NCOLS()) {
#ifdef SPLIT
                partial_store(s * NCOLS() * M() + ((gn / P()) * M() + oc) * P() + gn % P(), acc[r][q]);
#else
                y_store(((gn / P()) * M() + oc) * P() + gn % P(), y_t(acc[r][q] + b));
#endif
            }
        }
    }
#ifdef EPILOGUE
    // The fused ops over this thread's stored outputs (matmul::epilogue, column n = ow).
    for (var r = 0u; r < RM; r++) {
        let gm = m0 + tid.y + 16u * r;
        for (var q = 0u; q < RN && gm < MG(); q++) {
            let gn = n0 + tid.x + 16u * q;
            if (gn < NCOLS()) {
                matmul_epilogue_at(((gn / P()) * M() + g * MG() + gm) * P() + gn % P(), gn % P() % OW());
            }
        }
    }
#endif
}
