// One time step of RNN, GRU or LSTM for every (direction d, batch b, hidden unit h): the fused
// gate kernel after the step's recurrent products (matmul/*.wgsl). One thread per element; each
// reads and writes only its own element of the state, so the state is updated in place.
//
// xw  [D, rows, G*H]  X @ W^T for every step, rows = t * B + b (LAYOUT1: b * T + t);
// gr  [D, B, G*H]     H_{t-1} @ R^T of this step; GRU without linear_before_reset also reads
// gh  [D, B, G*H]     (r * H_{t-1}) @ R^T (only its h-gate third is used);
// bias [D, 2*G*H]     Wb then Rb (HAS_BIAS); peep [D, 3*H] (LSTM, HAS_PEEP: i, o, f);
// lens [B]            sequence lengths (HAS_LENS; else every sequence has T() steps);
// step [1]            the step s (the loop's iteration number);
// state [D*B*H] H, then (LSTM) [D*B*H] C; y (HAS_Y): Y at [t, d, b, h] (LAYOUT1: [b, t, d, h]).
// Step s of direction d is time t = s (forward) or len - 1 - s (reverse); a sequence shorter
// than s keeps its state and its Y rows at s are zero (onnxruntime's convention, as is a zero
// final state for an empty sequence). RESET (GRU, first pass): rh = r * H_{t-1} instead.
// Buffers as named above (computed in f32; the state keeps the model's dtype).
// Defs: CELL (0 RNN, 1 GRU, 2 LSTM), G (gates), ACTIVATIONS (act_f/act_g/act_h(d, x)),
// REVERSE0/REVERSE1, CLIP (a bound), LBR, INPUT_FORGET, the HAS_* flags. Params: D, B, H, T.
#import common::grid
#import elementwise::math

const G: u32 = #{G}u;

#{ACTIVATIONS}

fn reverse(d: u32) -> bool {
    if (d == 0u) {
        return #{REVERSE0};
    }
    return #{REVERSE1};
}

fn limit(x: f32) -> f32 {
#ifdef CLIP
    return clamp(x, -#{CLIP}, #{CLIP});
#else
    return x;
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= D() * B() * H()) {
        return;
    }
    let h = i % H();
    let b = (i / H()) % B();
    let d = i / (H() * B());
    let s = u32(step_load(0u));
#ifdef HAS_LENS
    let len = u32(max(lens_load(b), 0i));
#else
    let len = T();
#endif
    let gh_stride = G * H();
    let valid = s < len;
    var t = s;
    if (valid && reverse(d)) {
        t = len - 1u - s;
    }
#ifdef LAYOUT1
    let row = b * T() + t;
#else
    let row = t * B() + b;
#endif
    let xbase = (d * T() * B() + row) * gh_stride + h;
    let rbase = (d * B() + b) * gh_stride + h;
    let si = (d * B() + b) * H() + h;
#ifdef LAYOUT1
    let yi = ((b * T() + t) * D() + d) * H() + h;
#else
    let yi = ((t * D() + d) * B() + b) * H() + h;
#endif
#ifndef RESET
    if (!valid) {
#ifdef HAS_Y
        y_store(yi, y_t(0.0));
#endif
        if (s == 0u && len == 0u) {
            state_store(si, state_t(0.0));
#if CELL == 2
            state_store(D() * B() * H() + si, state_t(0.0));
#endif
        }
        return;
    }
#else
    if (!valid) {
        return;
    }
#endif
    // pre[g]: gate g's input-side sum (bias included); rec(g): its recurrent product.
    var pre: array<f32, #{G}>;
    for (var g = 0u; g < G; g++) {
        pre[g] = f32(xw_load(xbase + g * H()));
#ifdef HAS_BIAS
        pre[g] += f32(bias_load(d * 2u * gh_stride + g * H() + h));
#endif
    }
    let hp = f32(state_load(si));
#if CELL == 0
    var p = pre[0] + f32(gr_load(rbase));
#ifdef HAS_BIAS
    p += f32(bias_load(d * 2u * gh_stride + gh_stride + h));
#endif
    let hn = act_f(d, limit(p));
#endif
#if CELL == 1
    var rb = array<f32, 3>(0.0, 0.0, 0.0);
#ifdef HAS_BIAS
    for (var g = 0u; g < 3u; g++) {
        rb[g] = f32(bias_load(d * 2u * gh_stride + gh_stride + g * H() + h));
    }
#endif
    let z = act_f(d, limit(pre[0] + f32(gr_load(rbase)) + rb[0]));
    let r = act_f(d, limit(pre[1] + f32(gr_load(rbase + H())) + rb[1]));
#ifdef RESET
    rh_store(si, rh_t(r * hp));
    return;
#else
#ifdef LBR
    let ph = pre[2] + r * (f32(gr_load(rbase + 2u * H())) + rb[2]);
#else
    let ph = pre[2] + f32(gh_load(rbase + 2u * H())) + rb[2];
#endif
    let hh = act_g(d, limit(ph));
    let hn = (1.0 - z) * hh + z * hp;
#endif
#endif
#if CELL == 2
    let ci = D() * B() * H() + si;
    let cp = f32(state_load(ci));
    var q: array<f32, 4>;
    for (var g = 0u; g < 4u; g++) {
        q[g] = pre[g] + f32(gr_load(rbase + g * H()));
#ifdef HAS_BIAS
        q[g] += f32(bias_load(d * 2u * gh_stride + gh_stride + g * H() + h));
#endif
    }
#ifdef HAS_PEEP
    let pbase = d * 3u * H() + h;
    q[0] += f32(peep_load(pbase)) * cp;
    q[2] += f32(peep_load(pbase + 2u * H())) * cp;
#endif
    let ig = act_f(d, limit(q[0]));
#ifdef INPUT_FORGET
    let fg = 1.0 - ig;
#else
    let fg = act_f(d, limit(q[2]));
#endif
    let cg = act_g(d, limit(q[3]));
    let cn = fg * cp + ig * cg;
#ifdef HAS_PEEP
    q[1] += f32(peep_load(pbase + H())) * cn;
#endif
    let og = act_f(d, limit(q[1]));
    let hn = og * act_h(d, cn);
    state_store(ci, state_t(cn));
#endif
#ifndef RESET
    state_store(si, state_t(hn));
#ifdef HAS_Y
    y_store(yi, y_t(hn));
#endif
#endif
}
