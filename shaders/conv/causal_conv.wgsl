// CausalConvWithState: the sequence s = past_state ++ x (per batch b and channel c; past is
// K-1 = KS()-1 long, zeros when absent). Threads i < NY compute y[b, c, t] = bias[c] +
// sum_j w[c, j] * s[t + j] (then SiLU); threads past NY write present_state[b, c, r] =
// s[L + r], the last K-1 positions.
// Defs: SILU, HAS_Y, HAS_STATE, BIAS / PAST, and the bindings B_BIAS, B_PAST, B_Y, B_STATE.
// Params: TOTAL, NY, C, L, KS.
#import common::grid

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
#ifdef BIAS
@group(0) @binding(#{B_BIAS}) var<storage, read> bias: array<f32>;
#endif
#ifdef PAST
@group(0) @binding(#{B_PAST}) var<storage, read> past: array<f32>;
#endif
#ifdef HAS_Y
@group(0) @binding(#{B_Y}) var<storage, read_write> y: array<f32>;
#endif
#ifdef HAS_STATE
@group(0) @binding(#{B_STATE}) var<storage, read_write> present: array<f32>;
#endif

// Position p of row `row` (= b * C + c) of the sequence past ++ x.
fn seq(row: u32, p: u32) -> f32 {
    let k1 = KS() - 1u;
    if (p >= k1) {
        return x[row * L() + p - k1];
    }
#ifdef PAST
    return past[row * k1 + p];
#else
    return 0.0;
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
#ifdef HAS_Y
    if (i < NY()) {
        let t = i % L();
        let row = i / L();
        let c = row % C();
#ifdef BIAS
        var acc = bias[c];
#else
        var acc = 0.0;
#endif
        for (var j = 0u; j < KS(); j++) {
            acc += w[c * KS() + j] * seq(row, t + j);
        }
#ifdef SILU
        acc = acc / (1.0 + exp(-acc));
#endif
        y[i] = acc;
        return;
    }
#endif
#ifdef HAS_STATE
    let s = i - NY();
    let k1 = KS() - 1u;
    let row = s / k1;
    present[s] = seq(row, L() + s % k1);
#endif
}
