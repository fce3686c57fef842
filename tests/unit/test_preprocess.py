"""The WGSL template preprocessor: directives, substitution, imports, errors with file:line."""

from __future__ import annotations

import operator
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onyxia.codegen.preprocess import (
    format_def_value,
    inline_imports,
    load_shader,
    preprocess,
    resolve_shader_import,
    shader_root,
)
from onyxia.errors import ShaderError
from onyxia.operators.base import WORKGROUP_SIZE


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def lines(text: str) -> list[str]:
    """Non-empty output lines, stripped: what survived preprocessing."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def resolver(modules: dict[str, str]):
    """An in-memory resolver accepting 'foo::bar' and 'foo/bar', naming files 'foo/bar.wgsl'."""

    def resolve(name: str) -> tuple[str, str]:
        key = name.replace("/", "::")
        if key not in modules:
            raise ShaderError(f"no module '{name}'")
        return modules[key], key.replace("::", "/") + ".wgsl"

    return resolve


# --- #ifdef / #ifndef / #else / #endif ---------------------------------------------------------

IFDEF = src("""
    #ifdef FOO
    foo
    #else
    no_foo
    #endif
    #ifndef FOO
    not_foo
    #endif
""")


@pytest.mark.parametrize(
    ("defs", "expected"),
    [
        ({}, ["no_foo", "not_foo"]),
        ({"FOO": True}, ["foo"]),
        ({"FOO": False}, ["no_foo", "not_foo"]),  # False counts as undefined
        ({"FOO": 0}, ["foo"]),  # only False is undefined; 0 is a value
        ({"FOO": ""}, ["foo"]),
    ],
)
def test_ifdef_ifndef(defs, expected):
    assert lines(preprocess(IFDEF, defs)) == expected


def test_directive_lines_become_empty_lines_keeping_line_numbers():
    out = preprocess(IFDEF, {"FOO": True})
    assert out.splitlines() == ["", "foo", "", "", "", "", "", ""]
    assert out.endswith("\n")


def test_leading_whitespace_and_trailing_comments_on_directives():
    text = "  #ifdef A // a comment\n  a\n\t#else   // other\n  b\n  #endif // A\n"
    assert lines(preprocess(text, {"A": True})) == ["a"]
    assert lines(preprocess(text, {})) == ["b"]


def test_nesting():
    text = src("""
        #ifdef A
        a
        #ifdef B
        ab
        #ifndef C
        ab_not_c
        #endif
        #else
        a_not_b
        #endif
        #endif
        end
    """)
    assert lines(preprocess(text, {})) == ["end"]
    assert lines(preprocess(text, {"A": True})) == ["a", "a_not_b", "end"]
    assert lines(preprocess(text, {"A": True, "B": True})) == ["a", "ab", "ab_not_c", "end"]
    assert lines(preprocess(text, {"A": True, "B": True, "C": True})) == ["a", "ab", "end"]
    assert lines(preprocess(text, {"B": True, "C": True})) == ["end"]


def test_deep_nesting():
    depth = 50
    text = "".join(f"#ifdef D{i}\n" for i in range(depth)) + "deep\n" + "#endif\n" * depth
    every = {f"D{i}": True for i in range(depth)}
    assert lines(preprocess(text, every)) == ["deep"]
    assert lines(preprocess(text, {**every, "D49": False})) == []


# --- #if comparisons ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "defs", "taken"),
    [
        ("N == 3", {"N": 3}, True),
        ("N == 3", {"N": 4}, False),
        ("N != 3", {"N": 4}, True),
        ("N > 3", {"N": 4}, True),
        ("N > 3", {"N": 3}, False),
        ("N < 3", {"N": 2}, True),
        ("N >= 3", {"N": 3}, True),
        ("N <= 3", {"N": 4}, False),
        ("N == -1", {"N": -1}, True),
        ("N==3", {"N": 3}, True),  # no spaces needed
        ("X > 0.5", {"X": 0.75}, True),
        ("X == 2", {"X": 2.0}, True),
        ("FLAG == true", {"FLAG": True}, True),
        ("FLAG == true", {"FLAG": False}, False),  # present-but-False still compares
        ("FLAG != false", {"FLAG": True}, True),
        ("T == f32", {"T": "f32"}, True),
        ("T == f32", {"T": "f16"}, False),
        ("T != f32", {"T": "f16"}, True),
        ("T == 3", {"T": "3"}, True),  # a str def compares textually
    ],
)
def test_if_comparisons(condition, defs, taken):
    text = f"#if {condition}\nyes\n#else\nno\n#endif\n"
    assert lines(preprocess(text, defs)) == (["yes"] if taken else ["no"])


_OPS = {"==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
        ">=": operator.ge, "<=": operator.le}


@given(st.integers(-(2**40), 2**40), st.sampled_from(sorted(_OPS)), st.integers(-(2**40), 2**40))
def test_if_int_comparison_matches_python(value, op, literal):
    text = f"#if N {op} {literal}\nyes\n#endif\n"
    assert lines(preprocess(text, {"N": value})) == (["yes"] if _OPS[op](value, literal) else [])


def test_numpy_scalars_are_accepted_as_defs():
    text = "#if N == 4\n#{N} #{B}\n#endif\n"
    assert lines(preprocess(text, {"N": np.int64(4), "B": np.bool_(True)})) == ["4 true"]


# --- else chains -------------------------------------------------------------------------------

CHAIN = src("""
    #if N == 1
    one
    #else if N == 2
    two
    #else ifdef BIG
    big
    #else ifndef SMALL
    not_small
    #else
    other
    #endif
""")


@pytest.mark.parametrize(
    ("defs", "expected"),
    [
        ({"N": 1, "BIG": True}, ["one"]),  # the first taken branch wins
        ({"N": 2, "BIG": True}, ["two"]),
        ({"N": 3, "BIG": True}, ["big"]),
        ({"N": 3}, ["not_small"]),
        ({"N": 3, "SMALL": True}, ["other"]),
    ],
)
def test_else_chain(defs, expected):
    assert lines(preprocess(CHAIN, defs)) == expected


def test_conditions_in_dead_branches_are_not_evaluated():
    # KIND only exists when HAS_BIAS does: a dead #if may name it, and a taken branch stops the
    # chain before an undefined name is reached.
    text = src("""
        #ifdef HAS_BIAS
        #if KIND == 2
        bias2
        #endif
        #endif
        #ifdef A
        a
        #else if MISSING == 1
        never
        #endif
    """)
    assert lines(preprocess(text, {"A": True})) == ["a"]
    assert lines(preprocess(text, {"HAS_BIAS": True, "KIND": 2, "A": True})) == ["bias2", "a"]


def test_syntax_is_checked_even_in_dead_branches():
    with pytest.raises(ShaderError, match=r"^t.wgsl:2: #if expects"):
        preprocess("#ifdef OFF\n#if N ~ 3\n#endif\n#endif\n", {}, filename="t.wgsl")
    with pytest.raises(ShaderError, match=r"^t.wgsl:2: unknown directive '#bogus'"):
        preprocess("#ifdef OFF\n#bogus\n#endif\n", {}, filename="t.wgsl")


# --- substitution ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (256, "256"),
        (-3, "-3"),
        (True, "true"),
        (False, "false"),
        ("f32", "f32"),
        ("vec4<f32>(a, b, c, d)", "vec4<f32>(a, b, c, d)"),
        (0.5, "0.5"),
        (1.0, "1.0"),
        (1e-5, "1e-05"),
        (1e20, "1e+20"),
    ],
)
def test_substitution_of_each_type(value, text):
    assert preprocess("let x = #{X};\n", {"X": value}) == f"let x = {text};\n"


def test_substitution_several_per_line_and_spaces_in_braces():
    out = preprocess("var<workgroup> t: array<#{T}, #{ N }>; // #{T}\n", {"T": "f32", "N": 64})
    assert out == "var<workgroup> t: array<f32, 64>; // f32\n"


def test_substitution_at_line_start_is_not_a_directive():
    assert preprocess("    #{BODY}\n", {"BODY": "x = 1;"}) == "    x = 1;\n"


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_float_formatting_round_trips_f32(value):
    text = format_def_value(value)
    assert "." in text or "e" in text  # stays a float literal in WGSL
    assert np.float32(float(text)) == np.float32(value)


def test_non_finite_float_is_an_error():
    with pytest.raises(ShaderError, match="no literal"):
        preprocess("#{X}\n", {"X": float("inf")})


def test_substitution_only_in_active_lines():
    assert lines(preprocess("#ifdef OFF\n#{UNDEFINED}\n#endif\n", {})) == []


def test_define_is_not_a_directive():
    """naga_oil's #define is not supported: defs come from the operator, in one place."""
    with pytest.raises(ShaderError, match=r"t\.wgsl:1: unknown directive '#define'"):
        preprocess("#define N 2\n", {}, filename="t.wgsl")


# --- errors with file:line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ok\n#frobnicate X\n", r"t\.wgsl:2: unknown directive '#frobnicate'"),
        ("ok\n# lonely\n", r"t\.wgsl:2: malformed directive"),
        ("a\nb\n#else\n", r"t\.wgsl:3: #else without #if"),
        ("a\n#endif\n", r"t\.wgsl:2: #endif without #if"),
        ("#ifdef A\n#else\n#else\n#endif\n", r"t\.wgsl:3: #else after the final #else .*t\.wgsl:1"),
        ("#ifdef A\n#else ifdef B\n#else\n#else ifdef C\n#endif\n", r"t\.wgsl:4: #else after"),
        ("#ifdef A\n#else whatever\n#endif\n", r"t\.wgsl:2: expected #else"),
        ("#ifdef A B\n#endif\n", r"t\.wgsl:1: #ifdef expects one def name"),
        ("#if N\n#endif\n", r"t\.wgsl:1: #if expects 'NAME OP VALUE'"),
        ("#ifdef A\n#endif junk\n", r"t\.wgsl:2: unexpected text after #endif"),
        ("x\n\nlet a = #{MISSING};\n", r"t\.wgsl:3: #\{MISSING\}: shader def 'MISSING' is not"),
        ("let a = #{N;\n", r"t\.wgsl:1: unterminated '#\{'"),
        ("let a = #{1N};\n", r"t\.wgsl:1: malformed substitution"),
        ("a\n#if MISSING == 3\n#endif\n", r"t\.wgsl:2: .*'MISSING' is not defined"),
        ("#ifdef A\n#else if MISSING == 3\n#endif\n", r"t\.wgsl:2: .*'MISSING' is not defined"),
        ("#if B > 1\n#endif\n", r"t\.wgsl:1: .*bool def 'B'"),
        ("#if N == f32\n#endif\n", r"t\.wgsl:1: .*numeric def 'N'"),
        ("#if N == true\n#endif\n", r"t\.wgsl:1: .*numeric def 'N'"),
        ("#if T > 3\n#endif\n", r"t\.wgsl:1: .*string def 'T'"),
    ],
)
def test_errors_name_file_and_line(text, message):
    with pytest.raises(ShaderError, match=f"^{message}"):
        preprocess(text, {"B": True, "N": 1, "T": "f32"}, filename="t.wgsl")


def test_unterminated_if_names_the_line_that_opened_it():
    text = "a\n#ifdef A\n#endif\n#if N == 1\n#ifdef B\n#endif\nb\n"
    with pytest.raises(ShaderError, match=r"^t\.wgsl:4: '#if N == 1' is never closed by #endif"):
        preprocess(text, {"N": 1}, filename="t.wgsl")


def test_default_filename():
    with pytest.raises(ShaderError, match=r"^<shader>:1: "):
        preprocess("#endif\n", {})


def test_bad_def_name_or_type():
    with pytest.raises(ShaderError, match="not an identifier"):
        preprocess("", {"not a name": 1})
    with pytest.raises(ShaderError, match="unsupported type"):
        preprocess("", {"X": [1, 2]})


# --- imports -----------------------------------------------------------------------------------


def test_import_inlines_module_once():
    modules = {
        "common::a": "fn a() {}\n",
        "common::b": "#define_import_path common::b\n#import common::a\nfn b() { a(); }\n",
    }
    text = "#import common::a\n#import common/b\n#import common::b::{b}\nmain\n"
    out = preprocess(text, {}, resolve_import=resolver(modules))
    assert lines(out) == ["fn a() {}", "fn b() { a(); }", "main"]
    assert out.count("fn a()") == 1


def test_imported_module_sees_defs_and_errors_name_its_file():
    modules = {"m": "#ifdef FAST\nfn fast() {}\n#endif\nlet x = #{X};\n"}
    out = preprocess("#import m\n", {"FAST": True, "X": 2}, resolve_import=resolver(modules))
    assert lines(out) == ["fn fast() {}", "let x = 2;"]
    with pytest.raises(ShaderError, match=r"^m\.wgsl:4: #\{X\}"):
        preprocess("main\n#import m\n", {}, resolve_import=resolver(modules))


def test_import_cycle_names_the_chain():
    modules = {"a": "#import b\n", "b": "x\n#import c\n", "c": "#import a\n"}
    chain = r"main\.wgsl -> a\.wgsl -> b\.wgsl -> c\.wgsl -> a\.wgsl"
    with pytest.raises(ShaderError, match=rf"^c\.wgsl:1: import cycle: {chain}$"):
        preprocess("#import a\n", {}, filename="main.wgsl", resolve_import=resolver(modules))


def test_self_import_is_a_cycle():
    modules = {"main": "#import main\n"}
    with pytest.raises(ShaderError, match="import cycle: main.wgsl -> main.wgsl"):
        preprocess("#import main\n", {}, filename="main.wgsl", resolve_import=resolver(modules))


def test_missing_import_names_file_line_and_module():
    with pytest.raises(ShaderError, match=r"^t\.wgsl:2: cannot import 'nope::x'"):
        preprocess("a\n#import nope::x\n", {}, filename="t.wgsl", resolve_import=resolver({}))


def test_import_without_resolver_is_an_error():
    with pytest.raises(ShaderError, match=r"^t\.wgsl:1: #import common::grid: no import"):
        preprocess("#import common::grid\n", {}, filename="t.wgsl")


def test_import_inside_conditional_is_rejected():
    text = "#ifdef A\n#import m\n#endif\n"
    message = r"^t\.wgsl:2: #import inside a conditional block \(opened at t\.wgsl:1\)"
    with pytest.raises(ShaderError, match=message):
        preprocess(text, {}, filename="t.wgsl", resolve_import=resolver({"m": ""}))


def test_malformed_import():
    with pytest.raises(ShaderError, match=r"^t\.wgsl:1: #import expects a module name"):
        preprocess("#import 3d things\n", {}, filename="t.wgsl", resolve_import=resolver({}))


def test_inline_imports_keeps_other_directives_for_later_preprocessing():
    modules = {"m": "#define_import_path m\n#ifdef FAST\nfn fast() {}\n#endif\n"}
    template = "#import m\n#import m\n#if N == 2\nlet n = #{N};\n#endif\n"
    inlined = inline_imports(template, "t.wgsl", resolver(modules))
    assert "#import" not in inlined and "#define_import_path" not in inlined
    assert "#ifdef FAST" in inlined and "#{N}" in inlined
    # The saved form preprocesses without any resolver, with new defs each time.
    assert lines(preprocess(inlined, {"N": 2, "FAST": True})) == ["fn fast() {}", "let n = 2;"]
    assert lines(preprocess(inlined, {"N": 3})) == []
    direct = preprocess(template, {"N": 2}, resolve_import=resolver(modules))
    assert preprocess(inlined, {"N": 2}) == direct


def test_inline_imports_drops_comment_lines_but_keeps_line_numbers():
    modules = {"m": "// what m is for\nfn m() {}  // kept: code on the line\n"}
    template = "// header\n#import m\n    // indented note\nlet x = #{X};\n"
    inlined = inline_imports(template, "t.wgsl", resolver(modules))
    assert inlined.splitlines() == ["", "", "fn m() {}  // kept: code on the line", "", "let x = #{X};"]
    with pytest.raises(ShaderError, match=r"^t\.wgsl:5: #\{X\}"):
        preprocess(inlined, {}, filename="t.wgsl")


# --- the shader folder -------------------------------------------------------------------------


def test_shader_root_is_the_checkout_shaders_folder():
    root = shader_root()
    assert root.name == "shaders"
    assert (root / "common" / "grid.wgsl").is_file()


def test_load_shader_missing_names_the_path():
    with pytest.raises(ShaderError, match=r"no/such\.wgsl"):
        load_shader("no/such.wgsl")


def test_resolve_shader_import_accepts_both_spellings():
    text, name = resolve_shader_import("common::grid")
    assert name == "common/grid.wgsl"
    assert resolve_shader_import("common/grid") == (text, name)
    assert "fn grid_thread(wg: Grid) -> u32" in text
    with pytest.raises(ShaderError, match="leaves the shader folder"):
        resolve_shader_import("common/../../secret")


def render_from_folder(relpath: str, defs: dict) -> str:
    """A template of the shader folder preprocessed with its imports, as planning does."""
    return preprocess(load_shader(relpath), defs, filename=relpath, resolve_import=resolve_shader_import)


def test_templates_resolve_imports_from_the_shader_folder(tmp_path, monkeypatch):
    from onyxia.codegen import preprocess as module

    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "grid.wgsl").write_text(load_shader("common/grid.wgsl"))
    (tmp_path / "kernel.wgsl").write_text(
        "#import common::grid\n@compute @workgroup_size(#{WG})\nfn main() {}\n"
    )
    monkeypatch.setattr(module, "shader_root", lambda: tmp_path)
    out = render_from_folder("kernel.wgsl", {"WG": 64})
    assert "fn grid_thread" in out and "@workgroup_size(64)" in out
    with pytest.raises(ShaderError, match=r"kernel\.wgsl:2: #\{WG\}"):
        render_from_folder("kernel.wgsl", {})


def test_the_real_shared_helper_preprocesses():
    out = render_from_folder("common/grid.wgsl", {})
    assert "fn grid_thread" in out and "#define_import_path" not in out


def test_every_shared_module_is_named_by_its_path():
    # `#import a::b` resolves to a/b.wgsl: a header naming another path would mislead readers.
    root = shader_root()
    for path in sorted(root.rglob("*.wgsl")):
        headers = [line.split()[1] for line in path.read_text().splitlines()
                   if line.startswith("#define_import_path")]
        if headers:
            expected = path.relative_to(root).with_suffix("").as_posix().replace("/", "::")
            assert headers == [expected], path


def test_kernels_number_workgroups_only_through_common_grid():
    # The runtime may fold a long 1-D grid into x * y; common::grid is the one place that knows
    # how, so no other shader reads num_workgroups (nor spells the flat index itself).
    root = shader_root()
    offenders = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.wgsl")
                       if p.name != "grid.wgsl" and "num_workgroups" in p.read_text())
    assert offenders == []


def test_common_grid_and_the_operators_agree_on_the_workgroup_size():
    # PlanCtx.grid counts workgroups with WORKGROUP_SIZE; the kernels size them with grid.wgsl's
    # (a kernel given the WG_SIZE def declares that instead, and its planner counts with it).
    declared = [line for line in preprocess(load_shader("common/grid.wgsl"), {}).splitlines()
                if line.startswith("const WORKGROUP_SIZE")]
    assert declared == [f"const WORKGROUP_SIZE: u32 = {WORKGROUP_SIZE}u;"]
    declared = [line for line in preprocess(load_shader("common/grid.wgsl"), {"WG_SIZE": 8}).splitlines()
                if line.startswith("const WORKGROUP_SIZE")]
    assert declared == ["const WORKGROUP_SIZE: u32 = 8u;"]
