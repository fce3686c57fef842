// Stream compaction around an exclusive prefix sum (reduction/cumsum.wgsl) of 0/1 flags, for the
// ops whose output size the data decides (NonZero, Compress). One thread per element i < N():
// FLAGS:    flags[i] = (x[i] != 0), for i < LIVE() (a shorter Compress condition: 0 past it);
// SCATTER:  total = pos[N-1] + flags[N-1] (written to count[0]); element i, if flagged, is the
//           k = pos[i]-th hit and STORE writes it (NonZero: its coordinates at y[d * total + k];
//           Compress: its index at y[k]).
// Defs: T (x's storage type), BINDINGS, FLAGS | SCATTER, COORDS and STORE (generated WGSL).
#import common::grid

#{BINDINGS}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) {
        return;
    }
#ifdef FLAGS
    flags[i] = select(0i, 1i, i < LIVE() && x[i] != #{T}(0));
#else
    let total = u32(pos[N() - 1u] + flags[N() - 1u]);
    if (i == 0u) {
        count[0] = i32(total);
    }
    if (flags[i] == 0i) {
        return;
    }
    let k = u32(pos[i]);
    #{COORDS}
    #{STORE}
#endif
}
