// Depthwise 2-D convolution walking output rows, for CPU-type adapters (lavapipe): an invocation
// computes RH whole output rows of one channel, 4 positions a loop step, its 8-lane workgroup 8
// such row blocks of the channel (the workgroup's z index), so the KH x KW weights and the bias
// are loaded once an invocation and kept in registers.
// Input rows are read as aligned vec4s (IW % 4 == 0): each of the block's input rows ((RH - 1) *
// SH + (KH - 1) * DH + 1 of them) keeps a window of vec4s over the span a step reads (the
// positions 4 q * SW - PW .. of its 4 outputs and KW taps), the window slides SW vec4s a step:
// SW loads a row a step, the rest carried over from the step before (CARRY: zeros, filled by
// PRE steps that store nothing; SHIFT). On llvmpipe
// each vec4 component is a register of its own, so the taps' shifted vec4s picked out of the
// window cost no instructions; what costs is each per-lane memory access, and per output this
// kernel makes RH-th of ((RH - 1) * SH + KH) * SW / 4 vec4 loads and a quarter of a vec4 store
// (OW % 4 == 0), with the index arithmetic once an invocation.
// conv/depthwise_rows.wgsl (tiles of RH x RP positions) pays its setup and a per-lane element
// store per output, and reloads the taps' overlap at every tile edge.
// Defs: RH, ACCS (weights), CARRY (the rows' starts, the windows' carried vec4s), PRE, QLO, STEP
// (a step's loads, window picks and multiply-adds into acc0 ..), PICK_ROW (acc<r>), SHIFT, X4
// (set: x read as vec4s), HAS_BIAS, EPILOGUE* (in the store only). Params: NT (= N * TH), TH (= ceil(OH / RH)), C, QUADS (= ceil(OW / 4)),
// EOW and conv::window's (2-D). Trip counts: QUADS + PRE steps an invocation (the planner's
// guard bounds OW), and RH stores a step.
#import common::grid
#import matmul::epilogue
#import conv::row_loads

const RH = #{RH}u;

var<private> channel_bias: f32;

// Output (row r of the block, positions 4 q ..) = v (OW % 4 == 0: the planner's guard): bias,
// the fused ops on each value as stored, one vec4 store.
fn put(y0: u32, r: u32, q: u32, v: vec4<f32>) {
    let o = y0 + r * OW() + 4u * q;
#ifdef HAS_BIAS
    let b = v + vec4<f32>(channel_bias);
#else
    let b = v;
#endif
#ifdef EPILOGUE_IN_STORE
    let n = (4u * q) % EOW();
    y_store4(o / 4u, vec4<f32>(matmul_epilogue(b.x, o, n), matmul_epilogue(b.y, o + 1u, n + 1u),
                               matmul_epilogue(b.z, o + 2u, n + 2u), matmul_epilogue(b.w, o + 3u, n + 3u)));
#else
    y_store4(o / 4u, b);
#endif
}

@compute @workgroup_size(8)
fn main(wg: Grid) {
    let tile_id = grid_group(wg) * 8u + wg.lid;
    let tile = min(tile_id, NT() - 1u);
    let c = wg.wid.z;
    let n = tile / TH();
    let oh0 = (tile % TH()) * RH;
    var rows = min(RH, OH() - oh0);
    if (tile_id >= NT()) {
        rows = 0u;
    }
    let iy0 = i32(oh0 * SH()) - PH();
    let xc = (n * C() + c) * IH() * IW();
    let wc = c * KH() * KW();
#ifdef HAS_BIAS
    channel_bias = f32(bias_load(c));
#endif
    let y0 = (n * C() + c) * OH() * OW() + oh0 * OW();
    #{ACCS}
    #{CARRY}
    // The first PRE steps only fill the windows (their outputs lie left of the row): loads in
    // the loop alone, none before it (Mesa 25's lavapipe compiles each load site for ~5 ms a
    // component).
    for (var u = 0u; u < kept_bound(QUADS() + #{PRE}u, wg.nwg); u++) {
        let q = i32(u) - #{PRE};
        let qlo = q * i32(SW()) + #{QLO};
        #{STEP}
        for (var r = 0u; r < select(0u, rows, q >= 0); r++) {
            put(y0, r, u32(q), #{PICK_ROW});
        }
        #{SHIFT}
    }
}
