#define_import_path reduction::tree
#import reduction::lanes

// The lanes of each row (reduction::lanes) combine their partial results through a
// shared-memory tree. The importer declares the value type and how two values combine:
//   alias LaneValue = ...;
//   fn lane_merge(a: LaneValue, b: LaneValue) -> LaneValue
// (a comes from the lower lane: order-sensitive merges such as "first index wins" rely on it).

#if LANES == 1
// A thread per row: nothing to merge, and no barrier (lavapipe switches between a workgroup's
// SIMD batches of 8 threads at every barrier).
fn tree_merge(ln: Lane, value: LaneValue) -> LaneValue {
    return value;
}
#else
var<workgroup> lane_sh: array<LaneValue, WORKGROUP_SIZE>;

// Every lane of the row gets lane_merge over the row's values. Call it from uniform control
// flow: threads past the last row take part too (with any value), because of the barriers.
fn tree_merge(ln: Lane, value: LaneValue) -> LaneValue {
    lane_sh[ln.slot] = value;
    for (var s = LANES / 2u; s > 0u; s /= 2u) {
        workgroupBarrier();
        if (ln.lane < s) {
            lane_sh[ln.slot] = lane_merge(lane_sh[ln.slot], lane_sh[ln.slot + s * LANE_STEP]);
        }
    }
    workgroupBarrier();
    let total = lane_sh[lane_head(ln)];
    // A following call overwrites lane_sh only after every lane has read its total.
    workgroupBarrier();
    return total;
}
#endif
