// Det: the determinant of each of COUNT square N x N matrices, one thread per matrix: Gaussian
// elimination with partial pivoting on a private copy (about N^3 / 3 multiply-adds; N <= 32 keeps
// every thread's trip count far below lavapipe's loop limit).
// Buffers: x, y (computed in f32). Defs: N (static matrix size). Params: COUNT.
#import common::grid

const N: u32 = #{N}u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let m = grid_thread(wg);
    if (m >= COUNT()) { return; }
    var a: array<f32, N * N>;
    for (var e = 0u; e < N * N; e++) {
        a[e] = f32(x_load(m * N * N + e));
    }
    var det = 1.0;
    for (var k = 0u; k < N; k++) {
        var pivot = k;
        for (var r = k + 1u; r < N; r++) {
            if (abs(a[r * N + k]) > abs(a[pivot * N + k])) {
                pivot = r;
            }
        }
        if (a[pivot * N + k] == 0.0) {
            det = 0.0;
            break;
        }
        if (pivot != k) {
            for (var c = k; c < N; c++) {
                let t = a[k * N + c];
                a[k * N + c] = a[pivot * N + c];
                a[pivot * N + c] = t;
            }
            det = -det;
        }
        let d = a[k * N + k];
        det *= d;
        for (var r = k + 1u; r < N; r++) {
            let f = a[r * N + k] / d;
            for (var c = k + 1u; c < N; c++) {
                a[r * N + c] -= f * a[k * N + c];
            }
        }
    }
    y_store(m, y_t(det));
}
