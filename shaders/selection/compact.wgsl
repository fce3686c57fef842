// Stream compaction around an exclusive prefix sum (reduction/cumsum.wgsl) of 0/1 flags, for the
// ops whose output size the data decides (NonZero, Compress). One thread per element i < N():
// FLAGS:    flags[i] = (x[i] != 0), for i < LIVE() (a shorter Compress condition: 0 past it);
// SCATTER:  total = pos[N-1] + flags[N-1] (written to count[0]); element i, if flagged, is the
//           k = pos[i]-th hit and STORE writes it (NonZero: its coordinates at y[d * total + k];
//           Compress: its index at y[k]).
// Buffers: FLAGS: x, flags; SCATTER: flags, pos, y, count. Defs: FLAGS | SCATTER, COORDS and
// STORE (generated WGSL).
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) {
        return;
    }
#ifdef FLAGS
    flags_store(i, select(0i, 1i, i < LIVE() && x_load(i) != x_t(0)));
#else
    let total = u32(pos_load(N() - 1u) + flags_load(N() - 1u));
    if (i == 0u) {
        count_store(0u, i32(total));
    }
    if (flags_load(i) == 0i) {
        return;
    }
    let k = u32(pos_load(i));
    #{COORDS}
    #{STORE}
#endif
}
