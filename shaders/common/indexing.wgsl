#define_import_path common::indexing

// Shared index arithmetic. Import with `#import common::indexing`.

// ceil(a / b), e.g. workgroups needed to cover a elements; b must be non-zero.
// Written without (a + b - 1) / b, which overflows for a near 2^32.
fn onyxia_div_ceil(a: u32, b: u32) -> u32 {
    return a / b + select(0u, 1u, a % b != 0u);
}

// Flat invocation index of a dispatch folded into 2D: WebGPU caps each dispatch dimension at
// 65535 workgroups, so large element counts spill into y. `row_width` is the number of
// invocations per row (workgroups in x times the workgroup size in x).
fn onyxia_flat_index(global_id: vec3<u32>, row_width: u32) -> u32 {
    return global_id.y * row_width + global_id.x;
}
