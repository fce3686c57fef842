// NonMaxSuppression as onnx.reference and onnxruntime compute it, in two kernels.
// SELECT: one workgroup per (batch, class) pair g < G(). Candidates are the boxes whose score
//   passes the threshold (score > threshold, when one is given). Each thread ranks its
//   candidates (best score first, ties by the lower box index) into order[g * N + rank]; then
//   the candidates are visited best first: one is kept unless it overlaps (IoU > threshold) a box
//   kept before it, checked by all threads at once, until MAX_OUT boxes are kept.
//   kept[g * N + s] is the s-th kept box, nkept[g] how many.
// GATHER: one thread per (pair g, slot s < N): the kept boxes of pair g go to rows
//   sum(nkept[< g]) + s of y ([count, 3]: batch, class, box); thread 0 writes count[0].
// Buffers: boxes, scores, [max_boxes], [iou_threshold], [score_threshold], order, kept_boxes,
// nkept | nkept, kept_boxes, y, count (computed in f32). Defs: SELECT | GATHER, CENTER (boxes
// are [x_center, y_center, w, h], else [y1, x1, y2, x2] in either corner order), HAS_MAX, HAS_IOU,
// HAS_SCORE (the optional inputs). Params: G (batch * classes), C (classes), N (boxes).
#import common::grid

#ifdef SELECT
var<workgroup> votes: array<u32, WORKGROUP_SIZE>;
var<workgroup> shared_count: u32;
var<workgroup> shared_keep: u32;
// Set by any thread whose share of the kept boxes suppresses the candidate: O(1) per thread and
// candidate (a loop over the votes would spend lavapipe's per-invocation loop budget).
var<workgroup> suppressed: atomic<u32>;

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

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#ifdef SELECT
    let g = grid_group(wg);
    let lid = wg.lid;
    let b = g / C();
#ifdef HAS_MAX
    let max_out = u32(max(max_boxes_load(0u), 0i));
#else
    let max_out = 0u;
#endif
#ifdef HAS_IOU
    let threshold = f32(iou_threshold_load(0u));
#else
    let threshold = 0.0;
#endif
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
        let sk = score_of(g, k);
        var rank = 0u;
        for (var m = 0u; m < N(); m++) {
            if (is_candidate(g, m) && (score_of(g, m) > sk || (score_of(g, m) == sk && m < k))) {
                rank += 1u;
            }
        }
        order_store(g * N() + rank, i32(k));
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
