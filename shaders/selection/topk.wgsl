// TopK along one axis: the K best elements of each line, best first, ties by the lower index.
// A line is x[base + r * INNER] for r < N with base = (line / INNER) * N * INNER + line % INNER;
// outputs are laid out the same way with K in place of N.
// BITONIC: a workgroup sorts SLOTS / SIZE lines of SIZE slots (N padded to a power of two with
// NONE entries that sort last) in shared memory with a bitonic network, then writes the first K.
// Otherwise (long or symbolic lines): one workgroup per line makes K passes; pass r finds the best
// element that comes after pass r-1's pick in the (value, index) order, so every element is
// picked once and equal values come out by increasing index.
// Buffers: x, values, indices. Defs: CMP (">" largest, "<" smallest), WORST (x_t's worst value for CMP),
// BITONIC, SIZE, SLOTS. Params: L (lines), N (line length), INNER (element stride), K.
#import common::grid

const NONE: u32 = 0xffffffffu;  // "no element": comes after every real one

// Does (va, ia) come before (vb, ib)?
fn before(va: x_t, ia: u32, vb: x_t, ib: u32) -> bool {
    return ia != NONE && (ib == NONE || va #{CMP} vb || (va == vb && ia < ib));
}

fn in_base(line: u32) -> u32 {
    return (line / INNER()) * N() * INNER() + line % INNER();
}

fn out_base(line: u32) -> u32 {
    return (line / INNER()) * K() * INNER() + line % INNER();
}

#ifdef BITONIC
const SIZE: u32 = #{SIZE}u;
const HALF: u32 = SIZE / 2u;
const SLOTS: u32 = #{SLOTS}u;
const LINES: u32 = SLOTS / SIZE;

var<workgroup> sv: array<x_t, SLOTS>;
var<workgroup> si: array<u32, SLOTS>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let first = grid_group(wg) * LINES;
    let lid = wg.lid;
    for (var s = lid; s < SLOTS; s += 256u) {
        let line = first + s / SIZE;
        let r = s % SIZE;
        var v = #{WORST};
        var idx = NONE;
        if (line < L() && r < N()) {
            v = x_load(in_base(line) + r * INNER());
            idx = r;
        }
        sv[s] = v;
        si[s] = idx;
    }
    // Blocks of k slots alternate direction until the last stage sorts each line best first.
    for (var k = 2u; k <= SIZE; k = k * 2u) {
        for (var j = k / 2u; j > 0u; j = j / 2u) {
            workgroupBarrier();
            for (var p = lid; p < SLOTS / 2u; p += 256u) {
                let q = p % HALF;
                let local = 2u * j * (q / j) + q % j;
                let a = (p / HALF) * SIZE + local;
                let b = a + j;
                let best_first = (local & k) == 0u;
                let swap = select(before(sv[a], si[a], sv[b], si[b]), before(sv[b], si[b], sv[a], si[a]), best_first);
                if (swap) {
                    let tv = sv[a];
                    sv[a] = sv[b];
                    sv[b] = tv;
                    let ti = si[a];
                    si[a] = si[b];
                    si[b] = ti;
                }
            }
        }
    }
    workgroupBarrier();
    for (var s = lid; s < SLOTS; s += 256u) {
        let line = first + s / SIZE;
        let r = s % SIZE;
        if (line < L() && r < K()) {
            let o = out_base(line) + r * INNER();
            values_store(o, sv[s]);
            indices_store(o, i32(si[s]));
        }
    }
}
#else
var<workgroup> rv: array<x_t, 256>;
var<workgroup> ri: array<u32, 256>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let line = grid_group(wg);
    let lid = wg.lid;
    // Every thread of a workgroup serves the same line: the early exit is uniform.
    if (line >= L()) {
        return;
    }
    let base = in_base(line);
    let ob = out_base(line);
    var pv = #{WORST};
    var pi = NONE;
    for (var r = 0u; r < K(); r++) {
        var bv = #{WORST};
        var bi = NONE;
        for (var j = lid; j < N(); j += 256u) {
            let v = x_load(base + j * INNER());
            if ((pi == NONE || before(pv, pi, v, j)) && before(v, j, bv, bi)) {
                bv = v;
                bi = j;
            }
        }
        rv[lid] = bv;
        ri[lid] = bi;
        for (var s = 128u; s > 0u; s = s / 2u) {
            workgroupBarrier();
            if (lid < s && before(rv[lid + s], ri[lid + s], rv[lid], ri[lid])) {
                rv[lid] = rv[lid + s];
                ri[lid] = ri[lid + s];
            }
        }
        workgroupBarrier();
        pv = rv[0];
        pi = ri[0];
        if (lid == 0u) {
            values_store(ob + r * INNER(), pv);
            indices_store(ob + r * INNER(), i32(pi));
        }
        workgroupBarrier();  // the next pass overwrites rv / ri
    }
}
#endif
