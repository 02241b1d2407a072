"""``rebuild_docs --check``'s comparison of each committed output with the one rebuilt from ``results/``:
a text file exactly (a short unified diff where it differs), a PNG by its decoded pixels (within
``PIXEL_TOLERANCE``), and the outputs committed but no longer produced (a rebuild removes those)."""

from __future__ import annotations

import difflib
import os

from vaco_jax.studies.rebuild_docs_blocks import text_lines

# Two renderings of one figure "match" when no pixel channel differs by more than this (colours in
# [0, 1]). Rendering noise (a coordinate that moved by a rounding error, e.g. a CI computed on
# another CPU type) changes an edge pixel's antialiased coverage by a few hundredths at most; a
# curve, band edge or glyph that moved by a pixel or more changes some pixel by far more (a line
# pixel turning white is ~0.6-0.9, a light CI band ~0.15).
PIXEL_TOLERANCE = 0.1
DIFF_LINES = 40  # lines of unified diff printed per differing text file


def text_difference(rel: str, old: bytes, new: bytes) -> str | None:
    if old == new:
        return None
    a, b = (text_lines(x.decode(errors="replace")) for x in (old, new))
    diff = [d.rstrip("\n") for d in difflib.unified_diff(a, b, f"{rel} (committed)", f"{rel} (rebuilt)", n=1)]
    more = f"\n  ... {len(diff) - DIFF_LINES} more diff lines" if len(diff) > DIFF_LINES else ""
    return f"differs: {rel}\n" + "\n".join("  " + d for d in diff[:DIFF_LINES]) + more


def png_difference(rel: str, old_path: str, new_path: str) -> str | None:
    from matplotlib import image

    a, b = image.imread(old_path), image.imread(new_path)
    if a.shape != b.shape:
        return f"differs: {rel} (image of {a.shape[1]}x{a.shape[0]} pixels, rebuilt {b.shape[1]}x{b.shape[0]})"
    delta = abs(a.astype(float) - b.astype(float))
    worst = delta.max(axis=-1) if delta.ndim == 3 else delta
    n = int((worst > PIXEL_TOLERANCE).sum())
    if not n:
        return None
    return (f"differs: {rel} ({n} pixels differ by more than {PIXEL_TOLERANCE} in a colour channel, "
            f"at most by {worst.max():.2f})")


def compare(root: str, out: str, produced: list[str], committed: list[str]) -> list[str]:
    """One message per output that differs between ``root`` (committed) and ``out`` (rebuilt);
    ``committed``: the outputs found under ``root``, whether or not they are produced now."""
    problems = []
    for rel in produced:
        old, new = os.path.join(root, rel), os.path.join(out, rel)
        if not os.path.exists(old):
            problems.append(f"missing: {rel} (produced, not committed)")
        elif rel.endswith(".png"):
            problems.append(png_difference(rel, old, new))
        else:
            with open(old, "rb") as f, open(new, "rb") as g:
                problems.append(text_difference(rel, f.read(), g.read()))
    problems += [f"stale: {rel} (committed, no longer produced)" for rel in committed if rel not in produced]
    return [p for p in problems if p]
