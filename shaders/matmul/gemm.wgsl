// Tiled matrix product for many rows: y[i] = finish(A[i] @ B[i]), one TM x TN tile of one output
// matrix per workgroup (matmul::tile; TRANS_A / TRANS_B: the operand is stored transposed).
// SPLIT: K is split in SPLITS ranges of KCHUNK (a multiple of the tile's BK; lavapipe stops an
// invocation's loops after ~65,535 iterations, so no invocation walks a long K): workgroup z is
// batch * SPLITS + split, and each writes its raw partial sums to `partial` [SPLITS, P]
// (P = batch * M * N), which matmul/splitk.wgsl adds up and finishes (the epilogue runs once).
// Buffers: a, b, [c], [e0, e1, ...: the fused epilogue's operands, matmul::epilogue], y (partial with SPLIT). Defs: T (compute type), CHECKED, RM, RN, INDEX (batch index `i` -> idx_x0 / idx_x1), TRANS_A, TRANS_B, B_PANELS (B in
// column panels, matmul::panels: no B_KS, B_NS), GEMM, HAS_C, EPILOGUE*, SPLIT.
// Params: M, N, K; element strides A_MS, A_KS, B_KS, B_NS; batch strides A_BS, B_BS; the INDEX
// code's dims/strides; Gemm: ALPHA, BETA, C_MS, C_NS; SPLIT: SPLITS, KCHUNK, P.
#import matmul::epilogue
#import matmul::tile
#import matmul::panels  // empty without B_PANELS

alias TileValue = #{T};

// The batch's matrices: element offsets of A[i] and B[i].
struct TileSource {
    a_base: u32,
    b_base: u32,
}

fn tile_a(src: TileSource, m: u32, k: u32) -> #{T} {
    if (m < M() && k < K()) {
        return #{T}(a_load(src.a_base + m * A_MS() + k * A_KS()));
    }
    return #{T}(0);
}

fn tile_b(src: TileSource, k: u32, n: u32) -> #{T} {
    if (n < N() && k < K()) {
#ifdef B_PANELS
        return #{T}(b_load(src.b_base + b_panel_index(k, n)));
#else
        return #{T}(b_load(src.b_base + k * B_KS() + n * B_NS()));
#endif
    }
    return #{T}(0);
}

fn tile_mac(acc: #{T}, a: #{T}, b: #{T}) -> #{T} {
    return matmul_mac(acc, a, b);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) tid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
#ifdef SPLIT
    let s = wid.z % SPLITS();
    let i = wid.z / SPLITS();
    let k_begin = s * KCHUNK();
    let k_end = min(K(), k_begin + KCHUNK());
#else
    let i = wid.z;
    let k_begin = 0u;
    let k_end = K();
#endif
    #{INDEX}
    let m0 = wid.y * TM;
    let n0 = wid.x * TN;
    let acc = tile_product(TileSource(idx_x0 * A_BS(), idx_x1 * B_BS()), m0, n0, tid, lid, k_begin, k_end);
    let y_base = i * M() * N();
    for (var r = 0u; r < RM; r++) {
        let gm = m0 + tid.y + 16u * r;
        for (var q = 0u; q < RN; q++) {
            let gn = n0 + tid.x + 16u * q;
            if (gm < M() && gn < N()) {
#ifdef SPLIT
                partial_store(s * P() + y_base + gm * N() + gn, acc[r][q]);
#else
                y_store(y_base + gm * N() + gn, y_t(matmul_finish(acc[r][q], gm, gn)));
#endif
            }
        }
    }
#ifdef EPILOGUE
    for (var r = 0u; r < RM; r++) {
        let gm = m0 + tid.y + 16u * r;
        for (var q = 0u; q < RN; q++) {
            let gn = n0 + tid.x + 16u * q;
            if (gm < M() && gn < N()) {
                matmul_epilogue_at(y_base + gm * N() + gn, gn);
            }
        }
    }
#endif
}
