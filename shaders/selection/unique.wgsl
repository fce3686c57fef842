// Unique over D() items of S() elements each: item j is x[(o * D + j) * INNER + e] for the
// S = OUTER * INNER elements (o, e) in row-major order (without an axis: D elements, S = 1).
// Items compare lexicographically (np.unique's order). One thread per item, three passes:
// FIRST:   first[j] = the lowest m with item m == item j, cnt[j] = how many items equal it;
// RANK:    for a first occurrence j: rank[j] = its slot (SORTED: the number of distinct items
//          below it; else the number of first occurrences before it), and it writes its slot
//          of Y (y[(o * U + rank) * INNER + e], U the number of distinct items, also written to
//          count[0]), indices and counts;
// INVERSE: inverse[j] = rank[first[j]].
// Each thread loops over all items (D * S steps at most): the planner refuses sizes where that
// passes lavapipe's per-invocation loop budget.
// Buffers: x, first, cnt | x, first, cnt, rank, y, indices, counts, count | first, rank, inverse.
// Defs: FIRST | RANK | INVERSE, SORTED. Params: D, S, INNER.
#import common::grid

#ifndef INVERSE
fn element(j: u32, s: u32) -> x_t {
    return x_load(((s / INNER()) * D() + j) * INNER() + s % INNER());
}

// -1, 0, 1 as item a is below, equal to or above item b.
fn compare(a: u32, b: u32) -> i32 {
    for (var s = 0u; s < S(); s++) {
        let va = element(a, s);
        let vb = element(b, s);
        if (va < vb) {
            return -1;
        }
        if (va > vb) {
            return 1;
        }
    }
    return 0;
}
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let j = grid_thread(wg);
    if (j >= D()) {
        return;
    }
#ifdef FIRST
    var f = j;
    var c = 0i;
    for (var m = 0u; m < D(); m++) {
        if (compare(m, j) == 0) {
            f = min(f, m);
            c += 1i;
        }
    }
    first_store(j, i32(f));
    cnt_store(j, c);
#endif
#ifdef RANK
    var r = 0u;
    var u = 0u;
    for (var m = 0u; m < D(); m++) {
        if (u32(first_load(m)) != m) {
            continue;
        }
        u += 1u;
#ifdef SORTED
        if (compare(m, j) < 0) {
            r += 1u;
        }
#else
        if (m < j) {
            r += 1u;
        }
#endif
    }
    if (j == 0u) {
        count_store(0u, i32(u));
    }
    rank_store(j, i32(r));
    if (u32(first_load(j)) != j) {
        return;
    }
    for (var s = 0u; s < S(); s++) {
        y_store(((s / INNER()) * u + r) * INNER() + s % INNER(), element(j, s));
    }
    indices_store(r, i32(j));
    counts_store(r, cnt_load(j));
#endif
#ifdef INVERSE
    inverse_store(j, rank_load(u32(first_load(j))));
#endif
}
