"""The rollout's change set, read from an overlay's upper dir: exactly what the agent changed, nothing else.

Whiteouts (char device 0:0) are deletions; an opaque dir (xattr trusted.overlay.opaque=y) hides everything
below it in the lower dir. The patch is git-style and holds the text changes (`git apply` reproduces them);
binary files are listed apart and travel in the archive."""

from __future__ import annotations

import difflib
import io
import os
import stat
import tarfile
from pathlib import Path

from harnessproxy.sandbox import Diff


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque") == b"y"
    except OSError:
        return False


def _files_under(root: Path) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(root):
        out.extend(os.path.relpath(os.path.join(dirpath, f), root) for f in files)
    return out


def _read(path: Path) -> bytes:
    return os.readlink(path).encode() if path.is_symlink() else path.read_bytes()


def _metacopy(path: Path) -> bool:
    """An upper entry whose data still lives in the lower dir (a chown or chmod copied up metadata only)."""
    try:
        return "trusted.overlay.metacopy" in os.listxattr(path, follow_symlinks=False)
    except OSError:
        return False


def diff_overlay(lower: Path, upper: Path, merged: Path) -> Diff:
    """`merged` gives the new contents: a metacopy entry in `upper` holds none of its own."""
    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    for dirpath, dirnames, filenames in os.walk(upper):
        here = Path(dirpath)
        rel_dir = here.relative_to(upper)
        if rel_dir != Path(".") and _is_opaque(here) and (lower / rel_dir).is_dir():
            present = {str(rel_dir / f) for f in _files_under(here)}
            deleted += [
                str(rel_dir / f) for f in _files_under(lower / rel_dir) if str(rel_dir / f) not in present
            ]
        for name in [*filenames, *dirnames]:
            path = here / name
            rel = str(rel_dir / name) if rel_dir != Path(".") else name
            st = path.lstat()
            if _is_whiteout(st):
                gone = lower / rel
                if gone.is_dir() and not gone.is_symlink():
                    deleted += [f"{rel}/{f}" for f in _files_under(gone)]
                elif gone.exists() or gone.is_symlink():
                    deleted.append(rel)
                continue
            if stat.S_ISDIR(st.st_mode):
                continue  # walked; empty directories are not changes (as in git)
            before = lower / rel
            if before.is_file() or before.is_symlink():
                same_data = _metacopy(path) or _read(before) == _read(merged / rel)
                if not same_data or before.lstat().st_mode != st.st_mode:
                    modified.append(rel)
            else:
                added.append(rel)
    added, modified, deleted = sorted(added), sorted(modified), sorted(set(deleted))
    patch, binary = _patch(lower, merged, added, modified, deleted)
    return Diff(patch, added, modified, deleted, binary, _archive(merged, added + modified))


def _text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _patch(
    lower: Path, merged: Path, added: list[str], modified: list[str], deleted: list[str]
) -> tuple[str, list[str]]:
    out: list[str] = []
    binary: list[str] = []
    changes = [(p, "add") for p in added] + [(p, "mod") for p in modified] + [(p, "del") for p in deleted]
    for rel, kind in sorted(changes):
        old = b"" if kind == "add" else _read(lower / rel)
        new = b"" if kind == "del" else _read(merged / rel)
        old_text, new_text = _text(old), _text(new)
        if old_text is None or new_text is None:
            binary.append(rel)  # carried by the archive (and `deleted`): a patch without index lines cannot
            continue
        out.append(f"diff --git a/{rel} b/{rel}\n")
        if kind == "add":
            out.append(f"new file mode {_mode(merged / rel)}\n")
        elif kind == "del":
            out.append(f"deleted file mode {_mode(lower / rel)}\n")
        elif _mode(lower / rel) != _mode(merged / rel):
            out.append(f"old mode {_mode(lower / rel)}\nnew mode {_mode(merged / rel)}\n")
        lines = difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            "/dev/null" if kind == "add" else f"a/{rel}",
            "/dev/null" if kind == "del" else f"b/{rel}",
        )
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out), binary


def _mode(path: Path) -> str:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return "120000"
    return "100755" if st.st_mode & 0o111 else "100644"


def _archive(merged: Path, paths: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel in paths:
            tar.add(merged / rel, arcname=rel, recursive=False)
    return buf.getvalue()
