#define_import_path attention::flash

// The flash-style key walk shared by the CPU-type attention kernels (attention/gqa_flash.wgsl,
// attention/sdpa_flash.wgsl): a workgroup of 8 invocations, one (head, query row) pair each, walks
// the keys QT = 4 at a time with an online softmax per row. Its rows' query (scaled) lives in
// Slices of 8 vec4 columns, 8k .. 8k + 7 in slice k. The importer defines DV (vec4s per head row),
// NEG, key4(j, c) and value4(j, c) (vec4 c of key / value row j), a struct Out and
// store_vec4(o, value, i, k, lane, by_column, scales) (where vec4 i of acc slice k goes), and
// SOFTCAP's CAP() where set.
// Without subgroups every lane loads every K/V row and keeps its own pair's accumulators; with a
// subgroup of 8 (ONYXIA_SUBGROUPS, the lanes numbered by subgroup_invocation_id) lane i loads the
// rows' vec4 columns 8k + i and subgroupBroadcast hands them round, and the accumulators are held
// by column (acc slice k of lane c: pairs 0 .. 7 at vec4 column 8k + c), so that V needs no
// broadcast, only the pairs' weights do. (See gqa_flash.wgsl for the measurements.)

alias Slice = array<vec4<f32>, 8>;

// The QT keys of one step: positions (masked past `last`) and the rows they read (clamped).
struct Keys {
    at: vec4<u32>,
    row: vec4<u32>,
}

fn keys_from(j: u32, last: u32) -> Keys {
    let at = vec4(j, j + 1u, j + 2u, j + 3u);
    return Keys(at, min(at, vec4(last - 1u)));
}

// The running softmax of a row: max m, denominator l.
struct RowState {
    m: f32,
    l: f32,
}

// Folds the step's scores (q.k partial sums `dots`, a column per key, plus `bias`; live: the
// keys this row sees) into st: returns the factor that rescales the accumulators and sets p to
// the keys' weights.
fn softmax_step(st: ptr<function, RowState>, dots: mat4x4<f32>, bias: vec4<f32>, live: vec4<bool>,
                p: ptr<function, vec4<f32>>) -> f32 {
    var score = vec4(dot(dots[0], vec4(1.0)), dot(dots[1], vec4(1.0)), dot(dots[2], vec4(1.0)),
                     dot(dots[3], vec4(1.0))) + bias;
#ifdef SOFTCAP
    // tanh of a clamped argument: some drivers compute tanh through exp and overflow.
    score = CAP() * tanh(clamp(score / CAP(), vec4(-20.0), vec4(20.0)));
#endif
    score = select(vec4(NEG), score, live);
    let m_new = max((*st).m, max(max(score.x, score.y), max(score.z, score.w)));
    let alpha = exp((*st).m - m_new);
    *p = select(vec4(0.0), exp(score - vec4(m_new)), live);
    (*st).l = (*st).l * alpha + dot(*p, vec4(1.0));
    (*st).m = m_new;
    return alpha;
}

// Query slice k of the row at `qrow` (position pos); columns past the head are 0. (Written out,

// -- every lane loads every row (no usable subgroups) --

// (written out, no loops: the key walk is the only loop whose trips grow with the keys)
fn qk_plain(q: ptr<function, Slice>, k: u32, keys: Keys, d: mat4x4<f32>) -> mat4x4<f32> {
    var r = d;
    r += qk_column(q, 0u, k, keys);
    r += qk_column(q, 1u, k, keys);
    r += qk_column(q, 2u, k, keys);
    r += qk_column(q, 3u, k, keys);
    r += qk_column(q, 4u, k, keys);
    r += qk_column(q, 5u, k, keys);
    r += qk_column(q, 6u, k, keys);
    r += qk_column(q, 7u, k, keys);
    return r;
}

// q's vec4 column 8k + i times the step's keys' (past the head: q is 0, the keys' last column)
fn qk_column(q: ptr<function, Slice>, i: u32, k: u32, keys: Keys) -> mat4x4<f32> {
    let c = min(8u * k + i, DV - 1u);
    let qi = (*q)[i];
    return mat4x4(qi * key4(keys.row.x, c), qi * key4(keys.row.y, c), qi * key4(keys.row.z, c),
                  qi * key4(keys.row.w, c));
}

fn pv_plain(acc: ptr<function, Slice>, k: u32, keys: Keys, alpha: f32, p: vec4<f32>) {
    (*acc)[0] = (*acc)[0] * alpha + value_columns(0u, k, keys) * p;
    (*acc)[1] = (*acc)[1] * alpha + value_columns(1u, k, keys) * p;
    (*acc)[2] = (*acc)[2] * alpha + value_columns(2u, k, keys) * p;
    (*acc)[3] = (*acc)[3] * alpha + value_columns(3u, k, keys) * p;
    (*acc)[4] = (*acc)[4] * alpha + value_columns(4u, k, keys) * p;
    (*acc)[5] = (*acc)[5] * alpha + value_columns(5u, k, keys) * p;
    (*acc)[6] = (*acc)[6] * alpha + value_columns(6u, k, keys) * p;
    (*acc)[7] = (*acc)[7] * alpha + value_columns(7u, k, keys) * p;
}

// vec4 column 8k + i of the step's V rows, a matrix column per key
fn value_columns(i: u32, k: u32, keys: Keys) -> mat4x4<f32> {
    let c = min(8u * k + i, DV - 1u);
    return mat4x4(value4(keys.row.x, c), value4(keys.row.y, c), value4(keys.row.z, c), value4(keys.row.w, c));
}

// -- lanes share the rows they load (a subgroup of 8) --
#ifdef ONYXIA_SUBGROUPS

// vec4 column 8k + lane of the step's K (or V) rows, a matrix column per key.
fn lane_chunks(k: u32, lane: u32, keys: Keys, values: bool) -> mat4x4<f32> {
    let c = min(8u * k + lane, DV - 1u);
    if (values) {
        return mat4x4(value4(keys.row.x, c), value4(keys.row.y, c), value4(keys.row.z, c), value4(keys.row.w, c));
    }
    return mat4x4(key4(keys.row.x, c), key4(keys.row.y, c), key4(keys.row.z, c), key4(keys.row.w, c));
}

// q.k partial sums over slice k: lane i's chunks are columns 8k + i (subgroupBroadcast needs
// constant lanes: hence the 8 statements).
fn qk_shared(q: ptr<function, Slice>, kc: mat4x4<f32>, d: mat4x4<f32>) -> mat4x4<f32> {
    var r = d;
    r += mat4x4((*q)[0] * subgroupBroadcast(kc[0], 0u), (*q)[0] * subgroupBroadcast(kc[1], 0u),
                (*q)[0] * subgroupBroadcast(kc[2], 0u), (*q)[0] * subgroupBroadcast(kc[3], 0u));
    r += mat4x4((*q)[1] * subgroupBroadcast(kc[0], 1u), (*q)[1] * subgroupBroadcast(kc[1], 1u),
                (*q)[1] * subgroupBroadcast(kc[2], 1u), (*q)[1] * subgroupBroadcast(kc[3], 1u));
    r += mat4x4((*q)[2] * subgroupBroadcast(kc[0], 2u), (*q)[2] * subgroupBroadcast(kc[1], 2u),
                (*q)[2] * subgroupBroadcast(kc[2], 2u), (*q)[2] * subgroupBroadcast(kc[3], 2u));
    r += mat4x4((*q)[3] * subgroupBroadcast(kc[0], 3u), (*q)[3] * subgroupBroadcast(kc[1], 3u),
                (*q)[3] * subgroupBroadcast(kc[2], 3u), (*q)[3] * subgroupBroadcast(kc[3], 3u));
    r += mat4x4((*q)[4] * subgroupBroadcast(kc[0], 4u), (*q)[4] * subgroupBroadcast(kc[1], 4u),
                (*q)[4] * subgroupBroadcast(kc[2], 4u), (*q)[4] * subgroupBroadcast(kc[3], 4u));
    r += mat4x4((*q)[5] * subgroupBroadcast(kc[0], 5u), (*q)[5] * subgroupBroadcast(kc[1], 5u),
                (*q)[5] * subgroupBroadcast(kc[2], 5u), (*q)[5] * subgroupBroadcast(kc[3], 5u));
    r += mat4x4((*q)[6] * subgroupBroadcast(kc[0], 6u), (*q)[6] * subgroupBroadcast(kc[1], 6u),
                (*q)[6] * subgroupBroadcast(kc[2], 6u), (*q)[6] * subgroupBroadcast(kc[3], 6u));
    r += mat4x4((*q)[7] * subgroupBroadcast(kc[0], 7u), (*q)[7] * subgroupBroadcast(kc[1], 7u),
                (*q)[7] * subgroupBroadcast(kc[2], 7u), (*q)[7] * subgroupBroadcast(kc[3], 7u));
    return r;
}

// acc slice k (this lane's column, rows 0 .. 7) rescaled and fed the step's values: row r's
// factor and weights come from lane r.
fn pv_shared(acc: ptr<function, Slice>, vc: mat4x4<f32>, alpha: f32, p: vec4<f32>) {
    (*acc)[0] = (*acc)[0] * subgroupBroadcast(alpha, 0u) + vc * subgroupBroadcast(p, 0u);
    (*acc)[1] = (*acc)[1] * subgroupBroadcast(alpha, 1u) + vc * subgroupBroadcast(p, 1u);
    (*acc)[2] = (*acc)[2] * subgroupBroadcast(alpha, 2u) + vc * subgroupBroadcast(p, 2u);
    (*acc)[3] = (*acc)[3] * subgroupBroadcast(alpha, 3u) + vc * subgroupBroadcast(p, 3u);
    (*acc)[4] = (*acc)[4] * subgroupBroadcast(alpha, 4u) + vc * subgroupBroadcast(p, 4u);
    (*acc)[5] = (*acc)[5] * subgroupBroadcast(alpha, 5u) + vc * subgroupBroadcast(p, 5u);
    (*acc)[6] = (*acc)[6] * subgroupBroadcast(alpha, 6u) + vc * subgroupBroadcast(p, 6u);
    (*acc)[7] = (*acc)[7] * subgroupBroadcast(alpha, 7u) + vc * subgroupBroadcast(p, 7u);
}

// Every row's value of x (row r's from lane r).
fn rows_of(x: f32) -> array<f32, 8> {
    return array<f32, 8>(subgroupBroadcast(x, 0u), subgroupBroadcast(x, 1u), subgroupBroadcast(x, 2u),
                         subgroupBroadcast(x, 3u), subgroupBroadcast(x, 4u), subgroupBroadcast(x, 5u),
                         subgroupBroadcast(x, 6u), subgroupBroadcast(x, 7u));
}
#endif

// Stores acc slice k through the importer's store_vec4: `by_column` (the shared layout): pairs
// 0 .. 7 at column 8k + lane, scaled by scales[pair]; else this lane's columns 8k .. 8k + 7,
// scaled by scales[lane]. A loop over a copy of the slice: the accumulators keep their static
// indices (registers), and the eight stores written out took ~1 s of the kernel's compile on
// Mesa 25 (heads of 64: 2.2 -> 1.3-1.4 s; of 128: 6.8 -> 3.8 s). Its bound is 8, as a value the
// driver cannot unroll (o.b, the batch, never reaches u32's maximum).
fn store_slice(o: Out, acc: ptr<function, Slice>, k: u32, lane: u32, by_column: bool, scales: array<f32, 8>) {
    var out = *acc;
    let pairs = select(8u, 0u, o.b == 0xffffffffu);
    for (var i = 0u; i < pairs; i++) {
        store_vec4(o, out[i], i, k, lane, by_column, scales);
    }
}
