// NonMaxSuppression as onnx.reference and onnxruntime compute it, in two kernels.
// SELECT: one workgroup per (batch, class) pair g < G(). Candidates are the boxes whose score
//   passes the threshold (score > threshold, when one is given). Each thread ranks its
//   candidates (best score first, ties by the lower box index) into order[g * N + rank]; then
//   the candidates are visited best first: one is kept unless it overlaps (IoU > threshold) a box
//   kept before it, checked by all threads at once, until MAX_OUT boxes are kept.
//   kept[g * N + s] is the s-th kept box, nkept[g] how many.
// GATHER: one thread per (pair g, slot s < N): the kept boxes of pair g go to rows
//   sum(nkept[< g]) + s of y ([count, 3]: batch, class, box); thread 0 writes count[0].
// The large path, for more boxes than one workgroup ranks (each kernel's loops stay bounded):
// RANK: one thread per (pair g, box k): rank[k] over all N boxes, order[g * N + rank] = k.
// INIT: one workgroup per pair: state[g] = (candidates, next rank 0), nkept[g] = 0, and the
//   pair's removed bits cleared. MASK: one thread per (pair g, rank r, word w): bit j of
//   mask[(g * N + r) * W + w] says candidate r suppresses candidate 32w + j (> r), W = ceil(N/32).
// SCAN (dispatched ceil(N / CHUNK) times): one workgroup per pair visits the next CHUNK ranks in
//   order: a candidate not removed is kept (kept_boxes, nkept) and its mask row ORed into the
//   removed bits, which live in workgroup memory during the dispatch and in `removed` between.
// Buffers: boxes, scores, [max_boxes], [iou_threshold], [score_threshold], order, kept_boxes,
// nkept | nkept, kept_boxes, y, count (computed in f32), each kernel binding those it reads (SCORES,
// BOXES: the helpers over scores / boxes). Defs: SELECT | GATHER | ..., CENTER (boxes
// are [x_center, y_center, w, h], else [y1, x1, y2, x2] in either corner order), HAS_MAX, HAS_IOU,
// HAS_SCORE (the optional inputs), MAX_OUT (a constant max_boxes, clamped to int32). Params: G (batch * classes), C (classes), N (boxes).
#import common::grid

#ifdef SELECT
var<workgroup> votes: array<u32, WORKGROUP_SIZE>;
var<workgroup> shared_count: u32;
var<workgroup> shared_keep: u32;
// Set by any thread whose share of the kept boxes suppresses the candidate: O(1) per thread and
// candidate (a loop over the votes would spend lavapipe's per-invocation loop budget).
var<workgroup> suppressed: atomic<u32>;
#endif
#ifdef INIT
var<workgroup> tally: atomic<u32>;
#endif
#ifdef SCAN
// The suppressed-candidate bits of this pair, word w owned by thread w % WORKGROUP_SIZE.
var<workgroup> removed_bits: array<u32, #{MAX_WORDS}>;
var<workgroup> shared_state: vec3<u32>;  // candidates, kept so far, next rank to visit
#endif

#ifdef SCORES
fn score_of(g: u32, k: u32) -> f32 {
    return f32(scores_load(g * N() + k));
}

fn is_candidate(g: u32, k: u32) -> bool {
#ifdef HAS_SCORE
    return score_of(g, k) > f32(score_threshold_load(0u));
#else
    return true;
#endif
}

// How many candidates of pair g come before candidate k (best score first, ties by index).
fn rank_of(g: u32, k: u32) -> u32 {
    let sk = score_of(g, k);
    var rank = 0u;
    for (var m = 0u; m < N(); m++) {
        if (is_candidate(g, m) && (score_of(g, m) > sk || (score_of(g, m) == sk && m < k))) {
            rank += 1u;
        }
    }
    return rank;
}
#endif

#ifdef BOXES
// [x_min, y_min, x_max, y_max] of box k of batch b.
fn corners(b: u32, k: u32) -> vec4<f32> {
    let base = (b * N() + k) * 4u;
    let v = vec4<f32>(f32(boxes_load(base)), f32(boxes_load(base + 1u)), f32(boxes_load(base + 2u)), f32(boxes_load(base + 3u)));
#ifdef CENTER
    return vec4<f32>(v.x - v.z / 2.0, v.y - v.w / 2.0, v.x + v.z / 2.0, v.y + v.w / 2.0);
#else
    return vec4<f32>(min(v.y, v.w), min(v.x, v.z), max(v.y, v.w), max(v.x, v.z));
#endif
}

fn suppresses(b: u32, k1: u32, k2: u32, threshold: f32) -> bool {
    let a = corners(b, k1);
    let c = corners(b, k2);
    let ix = min(a.z, c.z) - max(a.x, c.x);
    let iy = min(a.w, c.w) - max(a.y, c.y);
    if (ix <= 0.0 || iy <= 0.0) {
        return false;
    }
    let inter = ix * iy;
    let area1 = (a.z - a.x) * (a.w - a.y);
    let area2 = (c.z - c.x) * (c.w - c.y);
    let union_area = area1 + area2 - inter;
    if (area1 <= 0.0 || area2 <= 0.0 || union_area <= 0.0) {
        return false;
    }
    return inter / union_area > threshold;
}
#endif

fn iou_threshold_value() -> f32 {
#ifdef HAS_IOU
    return f32(iou_threshold_load(0u));
#else
    return 0.0;
#endif
}

fn max_out_value() -> u32 {
#ifdef HAS_MAX
    return u32(max(max_boxes_load(0u), 0i));
#else
#ifdef MAX_OUT
    return #{MAX_OUT}u;
#else
    return 0u;
#endif
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#ifdef SELECT
    let g = grid_group(wg);
    let lid = wg.lid;
    let b = g / C();
    let max_out = max_out_value();
    let threshold = iou_threshold_value();
    // Rank every candidate: how many candidates come before it.
    if (lid == 0u) {
        atomicStore(&suppressed, 0u);
    }
    var mine = 0u;
    for (var k = lid; k < N(); k += WORKGROUP_SIZE) {
        if (!is_candidate(g, k)) {
            continue;
        }
        mine += 1u;
        order_store(g * N() + rank_of(g, k), i32(k));
    }
    votes[lid] = mine;
    workgroupBarrier();
    if (lid == 0u) {
        var total = 0u;
        for (var t = 0u; t < WORKGROUP_SIZE; t++) {
            total += votes[t];
        }
        shared_count = total;
    }
    storageBarrier();
    let candidates = workgroupUniformLoad(&shared_count);
    var kept = 0u;  // the same in every thread: only uniform values change it
    for (var r = 0u; r < candidates; r++) {
        if (kept >= max_out) {
            break;
        }
        let box = u32(order_load(g * N() + r));
        for (var s = lid; s < kept; s += WORKGROUP_SIZE) {
            if (suppresses(b, box, u32(kept_boxes_load(g * N() + s)), threshold)) {
                atomicOr(&suppressed, 1u);
                break;
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            let any = atomicExchange(&suppressed, 0u);
            shared_keep = 1u - any;
            if (any == 0u) {
                kept_boxes_store(g * N() + kept, i32(box));
            }
        }
        storageBarrier();
        if (workgroupUniformLoad(&shared_keep) == 1u) {
            kept += 1u;
        }
    }
    if (lid == 0u) {
        nkept_store(g, i32(kept));
    }
#endif
#ifdef RANK
    let i = grid_thread(wg);
    if (i >= G() * N()) {
        return;
    }
    let g = i / N();
    let k = i % N();
    if (is_candidate(g, k)) {
        order_store(g * N() + rank_of(g, k), i32(k));
    }
#endif
#ifdef INIT
    let g = grid_group(wg);
    let lid = wg.lid;
    let words = (N() + 31u) / 32u;
    if (lid == 0u) {
        atomicStore(&tally, 0u);
    }
    workgroupBarrier();
    var mine = 0u;
    for (var k = lid; k < N(); k += WORKGROUP_SIZE) {
        if (is_candidate(g, k)) {
            mine += 1u;
        }
    }
    for (var w = lid; w < words; w += WORKGROUP_SIZE) {
        removed_store(g * words + w, 0i);
    }
    atomicAdd(&tally, mine);
    workgroupBarrier();
    if (lid == 0u) {
        state_store(g * 2u, i32(atomicLoad(&tally)));
        state_store(g * 2u + 1u, 0i);
        nkept_store(g, 0i);
    }
#endif
#ifdef MASK
    let i = grid_thread(wg);
    let words = (N() + 31u) / 32u;
    if (i >= G() * N() * words) {
        return;
    }
    let w = i % words;
    let r = (i / words) % N();
    let g = i / (words * N());
    let candidates = u32(state_load(g * 2u));
    if (r >= candidates) {
        return;
    }
    let b = g / C();
    let threshold = iou_threshold_value();
    let box = u32(order_load(g * N() + r));
    var bits = 0u;
    for (var j = max(32u * w, r + 1u); j < min(32u * w + 32u, candidates); j++) {
        if (suppresses(b, box, u32(order_load(g * N() + j)), threshold)) {
            bits |= 1u << (j % 32u);
        }
    }
    mask_store((g * N() + r) * words + w, bitcast<i32>(bits));
#endif
#ifdef SCAN
    let g = grid_group(wg);
    let lid = wg.lid;
    let words = (N() + 31u) / 32u;
    for (var w = lid; w < words; w += WORKGROUP_SIZE) {
        removed_bits[w] = bitcast<u32>(removed_load(g * words + w));
    }
    if (lid == 0u) {
        shared_state = vec3<u32>(u32(state_load(g * 2u)), u32(nkept_load(g)), u32(state_load(g * 2u + 1u)));
    }
    let st = workgroupUniformLoad(&shared_state);
    let max_out = max_out_value();
    var kept = st.y;  // the same in every thread: only uniform values change it
    let end = min(st.z + #{CHUNK}u, st.x);
    var r = st.z;
    for (; r < end; r++) {
        if (kept >= max_out) {
            break;
        }
        let word = workgroupUniformLoad(&removed_bits[r / 32u]);
        workgroupBarrier();
        if ((word & (1u << (r % 32u))) != 0u) {
            continue;
        }
        if (lid == 0u) {
            kept_boxes_store(g * N() + kept, order_load(g * N() + r));
        }
        kept += 1u;
        let row = (g * N() + r) * words;
        for (var w = r / 32u + lid; w < words; w += WORKGROUP_SIZE) {  // one thread a word
            removed_bits[w] |= bitcast<u32>(mask_load(row + w));
        }
    }
    workgroupBarrier();
    for (var w = lid; w < words; w += WORKGROUP_SIZE) {
        removed_store(g * words + w, bitcast<i32>(removed_bits[w]));
    }
    if (lid == 0u) {
        nkept_store(g, i32(kept));
        state_store(g * 2u + 1u, i32(r));
    }
#endif
#ifdef GATHER
    let i = grid_thread(wg);
    if (i >= G() * N()) {
        return;
    }
    let g = i / N();
    let s = i % N();
    if (i == 0u) {
        var total = 0i;
        for (var p = 0u; p < G(); p++) {
            total += nkept_load(p);
        }
        count_store(0u, total);
    }
    if (s >= u32(nkept_load(g))) {
        return;
    }
    var row = s;
    for (var p = 0u; p < g; p++) {
        row += u32(nkept_load(p));
    }
    y_store(row * 3u, i32(g / C()));
    y_store(row * 3u + 1u, i32(g % C()));
    y_store(row * 3u + 2u, kept_boxes_load(g * N() + s));
#endif
}
