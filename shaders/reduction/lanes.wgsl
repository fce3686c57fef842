#define_import_path reduction::lanes
#import common::grid

// Rows shared by lanes: LANES threads (def LANES, a power of two dividing WORKGROUP_SIZE) serve
// one row, so a workgroup serves ROWS_PER_GROUP rows. Def RED_INNER picks who sits next to whom:
// 1, a row's lanes are adjacent threads (for a contiguous walk: adjacent lanes read adjacent
// elements); 0, adjacent threads take adjacent rows (for a walk with a long stride, where
// neighbouring rows are the neighbouring elements).

const LANES: u32 = #{LANES}u;
const ROWS_PER_GROUP: u32 = WORKGROUP_SIZE / LANES;
#if RED_INNER == 1
const LANE_STEP: u32 = 1u;  // distance between a row's neighbouring lanes, in threads
#else
const LANE_STEP: u32 = ROWS_PER_GROUP;
#endif

struct Lane {
    row: u32,     // the row this thread serves
    lane: u32,    // its lane within the row, < LANES
    slot: u32,    // its local invocation index
    valid: bool,  // row < rows: false in the surplus threads of the last workgroup
    length: u32,  // elements of the row: 0 when !valid, so that surplus threads walk nothing
                  // (but still reach every barrier)
}

// This thread's place among `rows` rows of `length` elements each.
fn lane_of(wg: Grid, rows: u32, length: u32) -> Lane {
#if RED_INNER == 1
    let local_row = wg.lid / LANES;
    let lane = wg.lid % LANES;
#else
    let local_row = wg.lid % ROWS_PER_GROUP;
    let lane = wg.lid / ROWS_PER_GROUP;
#endif
    let row = grid_group(wg) * ROWS_PER_GROUP + local_row;
    let valid = row < rows;
    return Lane(row, lane, wg.lid, valid, select(0u, length, valid));
}

// The slot of lane 0 of this thread's row.
fn lane_head(ln: Lane) -> u32 {
    return ln.slot - ln.lane * LANE_STEP;
}
