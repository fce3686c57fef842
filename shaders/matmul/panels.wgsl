#define_import_path matmul::panels

// B stored in column panels (def B_PANELS; onyxia/operators/matmul/panels.py): strips of B_PANEL
// columns, the last one N % B_PANEL wide, each row-major over the whole K, one after another.
// A CPU-type adapter's workgroup streams one strip as one contiguous run; a row of a strip is
// still B_PANEL contiguous elements, which a GPU's neighbouring invocations read coalesced.
// The importer has the params K and N. Without B_PANELS this module is empty.

#ifdef B_PANELS
const B_PANEL = 32u;

// The element index of B[k, n].
fn b_panel_index(k: u32, n: u32) -> u32 {
    let first = n - n % B_PANEL;
    return first * K() + k * min(B_PANEL, N() - first) + n - first;
}
#endif
