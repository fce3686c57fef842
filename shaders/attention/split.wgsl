#define_import_path attention::split

// Split-KV for the fused attention kernels: one workgroup per (query row, split of KPS keys)
// bounds the keys, and so the loop iterations, one invocation visits (lavapipe stops an
// invocation's loops after ~65,535 iterations; GPUs have watchdogs) and gives a decode step
// several workgroups per head. The grid's z is b * SPLITS + split; a row's partial state
// (m, l, COLS accumulators) for split `split` sits at ((row * SPLITS + split) * (COLS + 2)).
// Defs: SPLIT_KV, KPS (keys per split, a multiple of WG). Params: SPLITS, COLS (scalar value
// columns). Without SPLIT_KV: one split covering every key.

struct KeySplit {
    b: u32,      // batch
    index: u32,  // split
}

fn key_split(z: u32) -> KeySplit {
#ifdef SPLIT_KV
    return KeySplit(z / SPLITS(), z % SPLITS());
#else
    return KeySplit(z, 0u);
#endif
}

// The part of a row's keys [lo, hi) that this split visits: keys lo + index * KPS on (empty
// when the row has fewer), so SPLITS = ceil(the most keys a row visits / KPS).
fn split_lo(sp: KeySplit, lo: u32, hi: u32) -> u32 {
#ifdef SPLIT_KV
    return min(lo + sp.index * #{KPS}u, hi);
#else
    return lo;
#endif
}

fn split_hi(sp: KeySplit, lo: u32, hi: u32) -> u32 {
#ifdef SPLIT_KV
    return min(hi, lo + (sp.index + 1u) * #{KPS}u);
#else
    return hi;
#endif
}

#ifdef SPLIT_KV
// Is this workgroup one of several splits of its row (it stores a partial, not the output)?
fn split_partial() -> bool {
    return SPLITS() > 1u;
}

// Where the partial of row `row` (= (b * H + h) * S + s) and this split starts.
fn split_at(sp: KeySplit, row: u32) -> u32 {
    return (row * SPLITS() + sp.index) * (COLS() + 2u);
}
#endif
