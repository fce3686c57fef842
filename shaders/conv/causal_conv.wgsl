// CausalConvWithState: the sequence s = past_state ++ x (per batch b and channel c; past is
// K-1 = KS()-1 long, zeros when absent). Threads i < NY compute y[b, c, t] = bias[c] +
// sum_j w[c, j] * s[t + j] (then SiLU); threads past NY write present_state[b, c, r] =
// s[L + r], the last K-1 positions.
// Buffers: x, w, [bias], [past], [y], [present] (computed in f32).
// Defs: SILU, HAS_Y, HAS_STATE, BIAS / PAST.
// Params: TOTAL, NY, C, L, KS.
#import common::grid

// Position p of row `row` (= b * C + c) of the sequence past ++ x.
fn seq(row: u32, p: u32) -> f32 {
    let k1 = KS() - 1u;
    if (p >= k1) {
        return f32(x_load(row * L() + p - k1));
    }
#ifdef PAST
    return f32(past_load(row * k1 + p));
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
        var acc = f32(bias_load(c));
#else
        var acc = 0.0;
#endif
        for (var j = 0u; j < KS(); j++) {
            acc += f32(w_load(c * KS() + j)) * seq(row, t + j);
        }
#ifdef SILU
        acc = acc / (1.0 + exp(-acc));
#endif
        y_store(i, y_t(acc));
        return;
    }
#endif
#ifdef HAS_STATE
    let s = i - NY();
    let k1 = KS() - 1u;
    let row = s / k1;
    present_store(s, present_t(seq(row, L() + s % k1)));
#endif
}
