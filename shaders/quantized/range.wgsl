#define_import_path quantized::range

// DynamicQuantizeLinear's range over a workgroup (dynamic_range.wgsl, dynamic_quant_matmul.wgsl):
// each of the WG threads (def WG, a power of two) brings its partial (min, max); every thread
// gets the workgroup's, after a tree in workgroup memory.

var<workgroup> lows: array<f32, #{WG}>;
var<workgroup> highs: array<f32, #{WG}>;

fn workgroup_range(lid: u32, lo: f32, hi: f32) -> vec2<f32> {
    lows[lid] = lo;
    highs[lid] = hi;
    workgroupBarrier();
    for (var stride = #{WG}u / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            lows[lid] = min(lows[lid], lows[lid + stride]);
            highs[lid] = max(highs[lid], highs[lid + stride]);
        }
        workgroupBarrier();
    }
    let range = vec2<f32>(lows[0], highs[0]);
    workgroupBarrier();  // the arrays may be written again after this
    return range;
}
