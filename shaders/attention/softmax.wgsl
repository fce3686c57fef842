#define_import_path attention::softmax
#import attention::reduce

// Online softmax (flash-attention style) for the fused attention kernels: one workgroup owns one
// query row and visits its keys in chunks of WG, one key per lane. The running max m is uniform
// across the workgroup; each lane keeps its share of the denominator and owns DPT output
// columns c = lid + e * WG, whose accumulators are rescaled when m grows. Nothing as long as the
// key sequence is materialized.
// The importer declares:
//   alias SoftmaxValue = ...;  // the type of one value column (f32, vec4<f32>)
//   fn softmax_value(values: u32, key: u32, column: u32) -> SoftmaxValue  // v[key, column]
//   fn softmax_store(out: u32, column: u32, value: SoftmaxValue)        // y[column] = value
// where `values` and `out` are the offsets given to softmax_start / softmax_finish.
// Def: DPT (columns per lane: ceil(columns / WG)).
// Split-KV (def SPLIT_KV): a workgroup sees only one split of the keys (attention::split); it
// stores its unnormalized state with softmax_partial and attention/combine.wgsl merges the
// splits. The importer then also declares
//   fn softmax_partial_store(out: u32, column: u32, value: SoftmaxValue)  // partial[out + column..]
// writing a value column's scalars at out + (scalar column).

const DPT = #{DPT}u;
const NEG = -3.0e38;  // "minus infinity" that keeps exp(m_old - m_new) free of inf - inf

var<workgroup> p_sh: array<f32, WG>;

struct OnlineSoftmax {
    m: f32,        // max of the scores so far
    l: f32,        // this lane's share of sum exp(score - m)
    acc: array<SoftmaxValue, DPT>,  // this lane's columns of sum exp(score - m) * v
    values: u32,   // passed to softmax_value
    columns: u32,  // value columns
}

fn softmax_start(values: u32, columns: u32) -> OnlineSoftmax {
    var st: OnlineSoftmax;
    st.m = NEG;
    st.values = values;
    st.columns = columns;
    return st;
}

// Folds the chunk of keys [c0, min(c0 + WG, end)) into the softmax: this lane brings the score
// of key c0 + lid, `live` false when that key is masked or past the end. Call it from uniform
// control flow (it has barriers).
fn softmax_chunk(st: ptr<function, OnlineSoftmax>, lid: u32, c0: u32, end: u32, score: f32, live: bool) {
    let m_new = max((*st).m, reduce_max(lid, score));
    let alpha = exp((*st).m - m_new);
    var p = 0.0;
    if (live) {
        p = exp(score - m_new);
    }
    p_sh[lid] = p;
    (*st).l = (*st).l * alpha + p;
    (*st).m = m_new;
    workgroupBarrier();
    let count = min(WG, end - c0);
    for (var e = 0u; e < DPT; e++) {
        let c = lid + e * WG;
        if (c < (*st).columns) {
            var a = (*st).acc[e] * alpha;
            for (var jj = 0u; jj < count; jj++) {
                a += p_sh[jj] * softmax_value((*st).values, c0 + jj, c);
            }
            (*st).acc[e] = a;
        }
    }
    workgroupBarrier();
}

// Stores this lane's columns, normalized, through softmax_store and returns 1 / the denominator:
// 0 for a row without a live key, whose output is zeros, never NaN.
fn softmax_finish(st: OnlineSoftmax, lid: u32, out: u32) -> f32 {
    let denom = reduce_sum(lid, st.l);
    let inv = select(0.0, 1.0 / denom, denom > 0.0);
    for (var e = 0u; e < DPT; e++) {
        let c = lid + e * WG;
        if (c < st.columns) {
            softmax_store(out, c, st.acc[e] * inv);
        }
    }
    return inv;
}

#ifdef SPLIT_KV
// Stores (m, l, acc columns) unnormalized at partial[out..]: out + 2 + c for scalar column c.
fn softmax_partial(st: OnlineSoftmax, lid: u32, out: u32) {
    let denom = reduce_sum(lid, st.l);
    if (lid == 0u) {
        partial_store(out, st.m);
        partial_store(out + 1u, denom);
    }
    for (var e = 0u; e < DPT; e++) {
        let c = lid + e * WG;
        if (c < st.columns) {
            softmax_partial_store(out + 2u, c, st.acc[e]);
        }
    }
}
#endif
