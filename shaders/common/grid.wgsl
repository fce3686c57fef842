#define_import_path common::grid

// How a kernel numbers its workgroups and threads: the one way, for every kernel whose grid the
// runtime may fold. WebGPU caps each dispatch dimension (maxComputeWorkgroupsPerDimension, 65535
// by default), so the runtime folds a longer 1-D grid of x workgroups into x' * y with
// x' * y >= x; a kernel takes its workgroup's flat index from grid_group, never from
// workgroup_id.x alone. The surplus workgroups of a folded grid see indices past the end, which
// the kernel's bounds check already covers. z is never folded (kernels use it as a batch axis).

// Threads per workgroup of the kernels that use these helpers; operators/base.py WORKGROUP_SIZE
// is the same number (PlanCtx.grid counts workgroups with it). Def WG_SIZE: another size, for a
// kernel whose planner counts its workgroups with it (rownorm's CPU-adapter variant: 8).
#ifdef WG_SIZE
const WORKGROUP_SIZE: u32 = #{WG_SIZE}u;
#else
const WORKGROUP_SIZE: u32 = 256u;
#endif

// The builtins an entry point needs: `fn main(wg: Grid)`.
struct Grid {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
}

// This workgroup's index in the x-y grid, folded or not.
fn grid_group(wg: Grid) -> u32 {
    return wg.wid.y * wg.nwg.x + wg.wid.x;
}

// The workgroup-uniform builtins alone, for kernels with barriers or subgroup operations under
// control flow that depends on the workgroup: `fn main(wg: Groups, @builtin(local_invocation_index)
// lid: u32)`. Tint's uniformity analysis (Chrome, Dawn; naga has none) judges an entry point's
// struct parameter as one value, so a `Grid`, holding the local index, makes its workgroup ids
// look non-uniform and such kernels fail to compile in a browser.
struct Groups {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
}

// grid_group for a `Groups`.
fn groups_index(wg: Groups) -> u32 {
    return wg.wid.y * wg.nwg.x + wg.wid.x;
}

// This thread's index in a 1-D kernel (one thread per item, WORKGROUP_SIZE per workgroup).
fn grid_thread(wg: Grid) -> u32 {
    return grid_group(wg) * WORKGROUP_SIZE + wg.lid;
}

// `n`, as a value the driver's compiler cannot know: a loop it bounds stays a loop. Mesa's NIR
// unrolls a loop of a known trip count (up to ~32 iterations) and lavapipe turns each buffer
// load of the unrolled body into per-lane code that LLVM takes long to compile: a squeeze-excite
// block's gemv (K = 48, 12 trips) compiled in 1.9 s on Mesa 25 as 12 copies, 0.16 s as a loop.
// A dispatch that runs has workgroups, so this is always `n`.
fn kept_bound(n: u32, nwg: vec3<u32>) -> u32 {
    return select(n, 0u, nwg.z == 0u);
}
