// y[i] = START() (+ i * DELTA() with RANGE): ConstantOfShape, Dropout's mask, and Range over
// symbolic sizes. Defs: T (storage type), RANGE. Params: N (element count), START, DELTA.
#import common::grid

@group(0) @binding(0) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
#ifdef RANGE
    y[i] = START() + #{T}(i) * DELTA();
#else
    y[i] = #{T}(START());
#endif
}
