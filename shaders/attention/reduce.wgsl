#define_import_path attention::reduce

// Workgroup-wide max and sum for the attention kernels: WG lanes each hold one value; every lane
// gets the result. The barrier after reading keeps a following call from overwriting `red`
// while slower lanes still read it.
// Def ATT_WG: lanes per workgroup (default 64). A CPU-type adapter runs 8, one SIMD batch of
// lavapipe's 256-bit lanes, so that its barriers cost no coroutine switches.
#ifdef ATT_WG
const WG = #{ATT_WG}u;
#else
const WG = 64u;
#endif

var<workgroup> red: array<f32, WG>;

fn reduce_max(lid: u32, value: f32) -> f32 {
    red[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            red[lid] = max(red[lid], red[lid + stride]);
        }
        workgroupBarrier();
    }
    let result = red[0];
    workgroupBarrier();
    return result;
}

fn reduce_sum(lid: u32, value: f32) -> f32 {
    red[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            red[lid] = red[lid] + red[lid + stride];
        }
        workgroupBarrier();
    }
    let result = red[0];
    workgroupBarrier();
    return result;
}
