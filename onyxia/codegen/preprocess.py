"""WGSL template preprocessor using naga_oil's shader-def syntax.

Directives, each alone on a line (leading whitespace allowed, a trailing ``// comment`` ignored):

1. ``#ifdef NAME`` / ``#ifndef NAME`` -- NAME is defined when it is a key of ``defs`` whose value
   is not ``False``.
2. ``#if NAME OP VALUE`` with OP one of ``== != > < >= <=``; VALUE is an int, a float, ``true`` /
   ``false``, or any other token compared as a string. Ordering needs a numeric def.
3. ``#else``, ``#else ifdef NAME``, ``#else ifndef NAME``, ``#else if NAME OP VALUE``, ``#endif``,
   nested to any depth.
4. ``#import a::b`` / ``#import a/b`` / ``#import a::b::{x, y}`` inlines module ``a::b`` once;
   ``#define_import_path`` lines (naga_oil module headers) are dropped.
5. ``#{NAME}`` anywhere in an active line is replaced by the def's value (see ``format_def_value``).

Removed lines (directives, inactive branches) become empty lines so that naga's line numbers
still point at the template's lines; only inlined imports shift them. Errors raise
``ShaderError("file:line: message")`` naming the file the offending line came from.

Conditions are evaluated lazily: a ``#if`` inside an inactive branch is checked for syntax but
never evaluated, so it may name a def that only exists when its enclosing branch is taken.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onyxia.errors import ShaderError

DefValue = bool | int | float | str

ImportResolver = Callable[[str], tuple[str, str]]
"""Maps an import name (``common::grid``) to ``(source text, filename for messages)``.
The filename is also the module's identity for include-once and cycle detection."""

__all__ = [
    "DefValue",
    "ImportResolver",
    "format_def_value",
    "inline_imports",
    "load_shader",
    "preprocess",
    "resolve_shader_import",
    "shader_root",
]

# A directive is '#word' at the start of a line; '#{' starts a substitution instead.
_DIRECTIVE_RE = re.compile(r"^\s*#(?!\{)(\w*)(.*)$")
_NAME_RE = re.compile(r"[A-Za-z_]\w*")
_CONDITION_RE = re.compile(r"^([A-Za-z_]\w*)\s*(==|!=|>=|<=|>|<)\s*(\S+)$")
_INT_RE = re.compile(r"^[+-]?\d+$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(?=[eE]))([eE][+-]?\d+)?$")
# The second group is empty when the closing brace is missing.
_SUBST_RE = re.compile(r"#\{([^}\n]*)(\}?)")
_IMPORT_RE = re.compile(r'^"?([A-Za-z_][\w.-]*(?:(?:::|/)[A-Za-z_][\w.-]*)*)"?(?:::\{[^}]*\})?$')
_CONDITIONALS = ("ifdef", "ifndef", "if")


@dataclass(frozen=True, slots=True)
class _Line:
    """One source line and where it came from, so errors in imported modules name their file."""

    text: str
    file: str
    lineno: int

    def error(self, message: str) -> ShaderError:
        return ShaderError(f"{self.file}:{self.lineno}: {message}")


def _directive(line: _Line) -> tuple[str, str] | None:
    """``(keyword, argument)`` for a directive line, ``None`` for a WGSL line."""
    match = _DIRECTIVE_RE.match(line.text)
    if match is None:
        return None
    keyword, rest = match.groups()
    if not keyword:
        raise line.error(f"malformed directive '{line.text.strip()}'")
    # Directive arguments never contain '//', so a trailing comment can be cut blindly.
    rest = rest.split("//", 1)[0].strip()
    return keyword, rest


# --------------------------------------------------------------------------------------------
# Def values


def _normalize_def(name: str, value: object) -> DefValue:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ShaderError(f"shader def name {name!r} is not an identifier")
    # bool before int: bool is an int subclass, and numpy's bool_ is neither.
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return value
    raise ShaderError(f"shader def '{name}' has unsupported type {type(value).__name__}")


def format_def_value(value: DefValue) -> str:
    """WGSL text for a def value: ``256``, ``0.5``, ``1e-05``, ``true``, or a string verbatim.

    An int prints bare (an abstract int in WGSL, so it fits u32, i32 or f32 contexts); a float
    always has a '.' or exponent so it stays a float, with repr's round-trip digits (enough for
    f32)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ShaderError(f"WGSL has no literal for the float {value!r}")
        text = repr(value)
        return text if ("." in text or "e" in text) else text + ".0"
    return value


def _parse_literal(token: str) -> DefValue:
    """Parse a VALUE token of ``#if``: int, float, bool, else the string itself."""
    if _INT_RE.match(token):
        return int(token)
    if _FLOAT_RE.match(token):
        return float(token)
    if token in ("true", "false"):
        return token == "true"
    return token


_NUMERIC_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt,
    "<": operator.lt, ">=": operator.ge, "<=": operator.le,
}


def _is_defined(defs: Mapping[str, DefValue], name: str) -> bool:
    return name in defs and defs[name] is not False


def _check_condition(line: _Line, keyword: str, rest: str) -> None:
    """Syntax-check a conditional's argument, whether or not it will be evaluated."""
    if keyword in ("ifdef", "ifndef"):
        if not _NAME_RE.fullmatch(rest):
            raise line.error(f"#{keyword} expects one def name, got '{rest}'")
    elif _CONDITION_RE.match(rest) is None:
        raise line.error(f"#if expects 'NAME OP VALUE' with OP in == != > < >= <=, got '{rest}'")


def _evaluate(line: _Line, keyword: str, rest: str, defs: Mapping[str, DefValue]) -> bool:
    if keyword == "ifdef":
        return _is_defined(defs, rest)
    if keyword == "ifndef":
        return not _is_defined(defs, rest)
    name, op, token = _CONDITION_RE.match(rest).groups()  # type: ignore[union-attr]
    if name not in defs:
        raise line.error(f"#if {rest}: shader def '{name}' is not defined")
    value = defs[name]
    literal = _parse_literal(token)
    if isinstance(value, bool):
        if not isinstance(literal, bool) or op not in ("==", "!="):
            raise line.error(f"#if {rest}: bool def '{name}' only compares == / != true or false")
        return (value == literal) == (op == "==")
    if isinstance(value, (int, float)):
        if isinstance(literal, (bool, str)):
            raise line.error(f"#if {rest}: numeric def '{name}' compared with non-number '{token}'")
        return _NUMERIC_OPS[op](value, literal)
    if op not in ("==", "!="):
        raise line.error(f"#if {rest}: string def '{name}' only compares with == / !=")
    return (value == token) == (op == "==")


# --------------------------------------------------------------------------------------------
# Imports


def _inline(
    source: str,
    filename: str,
    resolve_import: ImportResolver | None,
    included: set[str],
    chain: list[str],
) -> list[_Line]:
    out: list[_Line] = []
    open_conditionals: list[_Line] = []
    for lineno, text in enumerate(source.splitlines(), 1):
        line = _Line(text, filename, lineno)
        parsed = _directive(line)
        if parsed is None:
            out.append(line)
            continue
        keyword, rest = parsed
        if keyword in _CONDITIONALS:
            open_conditionals.append(line)
        elif keyword == "endif" and open_conditionals:
            open_conditionals.pop()
        elif keyword == "define_import_path":
            out.append(_Line("", filename, lineno))
            continue
        elif keyword == "import":
            out.extend(_inline_one(line, rest, open_conditionals, resolve_import, included, chain))
            continue
        out.append(line)
    return out


def _inline_one(
    line: _Line,
    rest: str,
    open_conditionals: list[_Line],
    resolve_import: ImportResolver | None,
    included: set[str],
    chain: list[str],
) -> list[_Line]:
    # inline_imports runs before any def is known, so an import cannot depend on one; an unused
    # helper function costs nothing in WGSL, so import unconditionally instead.
    if open_conditionals:
        opener = open_conditionals[-1]
        raise line.error(
            f"#import inside a conditional block (opened at {opener.file}:{opener.lineno}) is "
            "not supported; import unconditionally"
        )
    match = _IMPORT_RE.match(rest)
    if match is None:
        raise line.error(f"#import expects a module name like 'common::grid', got '{rest}'")
    name = match.group(1)
    if resolve_import is None:
        raise line.error(f"#import {name}: no import resolver was given")
    try:
        text, module_file = resolve_import(name)
    except (ShaderError, OSError, LookupError, ValueError) as exc:
        raise line.error(f"cannot import '{name}': {exc}") from exc
    if module_file in chain:
        raise line.error(f"import cycle: {' -> '.join([*chain, module_file])}")
    if module_file in included:
        return [_Line("", line.file, line.lineno)]
    included.add(module_file)
    return _inline(text, module_file, resolve_import, included, [*chain, module_file])


def inline_imports(source: str, filename: str, resolve_import: ImportResolver | None) -> str:
    """Replace every ``#import`` by the module's text (recursively, each module once) and leave
    all other directives in place, so the result can be preprocessed later without the shader
    folder (saved plans store this form). Whole-line ``//`` comments become empty lines: the
    prose stays in shaders/, not in every plan, and line numbers do not move."""
    lines = _inline(source, filename, resolve_import, {filename}, [filename])
    return "\n".join("" if line.text.lstrip().startswith("//") else line.text for line in lines) + "\n"


# --------------------------------------------------------------------------------------------
# Conditionals and substitution


@dataclass(slots=True)
class _Block:
    """An open ``#if...#endif``: which branch (if any) has been taken so far."""

    opener: _Line
    parent_active: bool
    taken: bool
    active: bool
    seen_else: bool = False


@dataclass(slots=True)
class _Evaluator:
    defs: dict[str, DefValue]
    blocks: list[_Block] = field(default_factory=list)
    out: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.blocks[-1].active if self.blocks else True

    def run(self, lines: list[_Line]) -> str:
        for line in lines:
            parsed = _directive(line)
            if parsed is None:
                self.out.append(self._substitute(line) if self.active else "")
            else:
                self._handle(line, *parsed)
                self.out.append("")  # keep line numbers aligned with the template
        if self.blocks:
            opener = self.blocks[-1].opener
            raise opener.error(f"'{opener.text.strip()}' is never closed by #endif")
        return "\n".join(self.out) + "\n"

    def _handle(self, line: _Line, keyword: str, rest: str) -> None:
        if keyword in _CONDITIONALS:
            _check_condition(line, keyword, rest)
            active = self.active and _evaluate(line, keyword, rest, self.defs)
            self.blocks.append(_Block(line, self.active, active, active))
        elif keyword == "else":
            self._else(line, rest)
        elif keyword == "endif":
            if not self.blocks:
                raise line.error("#endif without #if")
            if rest:
                raise line.error(f"unexpected text after #endif: '{rest}'")
            self.blocks.pop()
        elif keyword == "define_import_path":
            pass  # a module header; meaningless once inlined
        elif keyword == "import":
            raise line.error("#import must be inlined first (no import resolver was given)")
        else:
            raise line.error(f"unknown directive '#{keyword}'")

    def _else(self, line: _Line, rest: str) -> None:
        if not self.blocks:
            raise line.error("#else without #if")
        block = self.blocks[-1]
        if block.seen_else:
            raise line.error(
                f"#else after the final #else of the #if at {block.opener.file}:"
                f"{block.opener.lineno}"
            )
        if not rest:
            block.seen_else = True
            block.active = block.parent_active and not block.taken
        else:
            keyword, cond = (rest.split(None, 1) + [""])[:2]
            if keyword not in _CONDITIONALS:
                raise line.error(f"expected #else, #else ifdef/ifndef/if, got '#else {rest}'")
            _check_condition(line, keyword, cond)
            # Only evaluate when this branch could be taken, like a chain of if/else if.
            live = block.parent_active and not block.taken
            block.active = live and _evaluate(line, keyword, cond, self.defs)
        block.taken = block.taken or block.active

    def _substitute(self, line: _Line) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1).strip()
            if not match.group(2):
                raise line.error("unterminated '#{' substitution")
            if not _NAME_RE.fullmatch(name):
                raise line.error(f"malformed substitution '#{{{match.group(1)}}}'")
            if name not in self.defs:
                raise line.error(f"#{{{name}}}: shader def '{name}' is not defined")
            return format_def_value(self.defs[name])

        return _SUBST_RE.sub(replace, line.text) if "#{" in line.text else line.text


def preprocess(
    source: str,
    defs: Mapping[str, DefValue],
    *,
    filename: str = "<shader>",
    resolve_import: ImportResolver | None = None,
) -> str:
    """Final WGSL for a template and its defs (see the module docstring for the syntax)."""
    scope = {name: _normalize_def(name, value) for name, value in defs.items()}
    lines = _inline(source, filename, resolve_import, {filename}, [filename])
    return _Evaluator(scope).run(lines)


# --------------------------------------------------------------------------------------------
# The shader folder


def shader_root() -> Path:
    """The folder holding the WGSL files: ``onyxia/shaders`` in an installed wheel, else the
    top-level ``shaders/`` of a source checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "shaders", package_dir.parent / "shaders"):
        if candidate.is_dir():
            return candidate
    raise ShaderError(
        f"shader folder not found at {package_dir / 'shaders'} or {package_dir.parent / 'shaders'}"
    )


def load_shader(relpath: str) -> str:
    """The text of ``shader_root()/relpath``."""
    path = shader_root() / relpath
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShaderError(f"shader file '{relpath}' not found (looked for {path})") from None


def resolve_shader_import(name: str) -> tuple[str, str]:
    """Import resolver for the shader folder: ``foo::bar`` or ``foo/bar`` -> ``foo/bar.wgsl``."""
    relpath = name.strip('"').replace("::", "/")
    if ".." in relpath.split("/"):
        raise ShaderError(f"import '{name}' leaves the shader folder")
    if not relpath.endswith(".wgsl"):
        relpath += ".wgsl"
    return load_shader(relpath), relpath
