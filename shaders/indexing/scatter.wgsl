// ScatterND / ScatterElements, after y has been filled with a copy of the data:
// y[dst(i)] = REDUCE(y[dst(i)], upd[...]). Defs: T (storage type of upd and y), REDUCE (WGSL
// over `a` (current) and `v` (update)), BODY (generated code computing destinations from i;
// it loops over the updates that may hit the same element so that they apply in order).
#import common::grid
#import indexing::index

@group(0) @binding(0) var<storage, read> idx: array<i32>;
@group(0) @binding(1) var<storage, read> upd: array<#{T}>;
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;

fn combine(a: #{T}, v: #{T}) -> #{T} {
    return #{REDUCE};
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    #{BODY}
}
