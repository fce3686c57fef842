// AffineGrid: grid[n, p, k] = theta[n, k, RANK] + sum_j theta[n, k, j] * base_j(p), where base
// is the normalized position of output point p, last axis first: (x, y[, z]). One thread per
// output element. ALIGN: -1 and 1 are the end pixels' centers, else their outer edges.
// Buffers: theta, grid (floats; computed in f32). Defs: RANK (2 | 3), ALIGN. Params: TOTAL, OD (1 in 2-D), OH, OW.
#import common::grid

const R: u32 = #{RANK}u;

fn normalized(i: u32, len: u32) -> f32 {
#ifdef ALIGN
    return select(-1.0 + f32(i) * 2.0 / f32(len - 1u), -1.0, len == 1u);
#else
    return (2.0 * f32(i) + 1.0) / f32(len) - 1.0;
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    let k = i % R;
    let pt = i / R;
    let w = pt % OW();
    let t = pt / OW();
    let h = t % OH();
    let nd = t / OH();
    let d = nd % OD();
    let n = nd / OD();
    let base = vec3<f32>(normalized(w, OW()), normalized(h, OH()), normalized(d, OD()));
    let row = (n * R + k) * (R + 1u);
    var acc = f32(theta_load(row + R));
    for (var j = 0u; j < R; j++) {
        acc += f32(theta_load(row + j)) * base[j];
    }
    grid_store(i, grid_t(acc));
}
