"""File names that come from a model (external data, genai_config.json) stay inside its folder.

A model folder is untrusted input: a name such as `../secrets`, `/etc/passwd` or a symlink that
points out of the folder must not make onyxia read a file the user did not hand it. onyxia checks
this itself rather than relying on the installed onnx version (onnx>=1.16 allows versions
without such checks). Symlinks that stay inside the folder are fine.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

from onyxia.errors import OnyxiaError


def resolve_inside(folder: str | Path, name: object, what: str,
                   error: type[OnyxiaError] = OnyxiaError) -> Path:
    """The real path of `folder/name`, or `error` naming `what` when it would leave `folder`.

    Refused: a non-string or empty name, NUL bytes, absolute paths (POSIX or Windows, drive
    letters included), any `..` component, and names whose resolved path (symlinks followed)
    is not inside the resolved folder. The file need not exist; callers check that.
    """
    if not isinstance(name, str) or not name.strip():
        raise error(f"{what}: expected a file name relative to {folder}, got {name!r}")
    if "\0" in name:
        raise error(f"{what}: file name {name!r} contains a NUL byte")
    # Check both spellings: a Windows-style name is hostile on Linux too, never a real file.
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or windows.root:
        raise error(f"{what}: file name {name!r} is absolute; it must be relative to {folder}")
    if ".." in posix.parts or ".." in windows.parts:
        raise error(f"{what}: file name {name!r} contains '..'; it must stay inside {folder}")
    try:
        base = Path(folder).resolve()
        target = (base / name).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise error(f"{what}: cannot resolve '{name}' in {folder} ({exc})") from None
    if target != base and base not in target.parents:
        raise error(f"{what}: '{name}' resolves to {target}, outside {base} (a symlink out of "
                    "the folder)")
    return target
