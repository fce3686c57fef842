// Windowed pooling, one thread per output element (image-channel nc, output position p).
// Spatial axes are 3-D (z, y, x; leading unit axes for 1-D and 2-D). The window starts at
// position * stride - pad and steps by the dilation; positions outside the input are skipped.
// Buffers: x, y, [indices]. Defs: MODE (max | avg | lp).
//   max: LOWEST (x_t's lowest value), INDICES (second output: flat input index),
//        COLMAJOR (storage_order 1: spatial index column-major).
//   avg: COUNT_PAD (divide by the positions inside the padded input, not the input).
// Params: TOTAL (= N*C*P), P, ISP, ID/IH/IW, OH/OW, KD/KH/KW, SD/SH/SW, DD/DH/DW, PD/PH/PW (i32),
// ED/EH/EW (i32: end of the padded input), LP (lp: the exponent p).
#import common::grid


@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    let p = i % P();
    let nc = i / P();
    let ow = p % OW();
    let t = p / OW();
    let oh = t % OH();
    let od = t / OH();
    let z0 = i32(od * SD()) - PD();
    let y0 = i32(oh * SH()) - PH();
    let x0 = i32(ow * SW()) - PW();
    let base = nc * ISP();
#if MODE == max
    var best = #{LOWEST};
    var at = vec3<u32>(0u);
    var found = false;
#else
    var acc = 0.0;
    var count = 0u;
#endif
    for (var kd = 0u; kd < KD(); kd++) {
        let iz = z0 + i32(kd * DD());
        for (var kh = 0u; kh < KH(); kh++) {
            let iy = y0 + i32(kh * DH());
            for (var kw = 0u; kw < KW(); kw++) {
                let ix = x0 + i32(kw * DW());
                // Negative coordinates wrap to huge u32s: one comparison checks both bounds.
                if (u32(iz) < ID() && u32(iy) < IH() && u32(ix) < IW()) {
                    let v = x_load(base + (u32(iz) * IH() + u32(iy)) * IW() + u32(ix));
#if MODE == max
                    if (!found || v > best) {
                        best = v;
                        at = vec3<u32>(u32(iz), u32(iy), u32(ix));
                        found = true;
                    }
#else if MODE == avg
                    acc += f32(v);
                    count += 1u;
#else
                    acc += pow(abs(f32(v)), LP());
#endif
                }
#ifdef COUNT_PAD
                else if (iz < ED() && iy < EH() && ix < EW()) {
                    count += 1u;
                }
#endif
            }
        }
    }
#if MODE == max
    y_store(i, best);
#ifdef INDICES
#ifdef COLMAJOR
    let spatial = at.x + ID() * (at.y + IH() * at.z);
#else
    let spatial = (at.x * IH() + at.y) * IW() + at.z;
#endif
    indices_store(i, i32(base + spatial));
#endif
#else if MODE == avg
    y_store(i, y_t(acc / f32(max(count, 1u))));
#else
    y_store(i, y_t(pow(acc, 1.0 / LP())));
#endif
}
