"""FINDINGS.md's generated blocks (``rebuild_docs``): each block lies between the marker lines
``<!-- generated: NAME (python experiments/rebuild_docs.py) -->`` and ``<!-- end generated: NAME -->``;
they are found and checked here, and the text rebuilt with each block's content replaced by its
writer's while every byte outside the blocks is kept. A name that has no writer, a block without its
end marker or a malformed marker line is a ``DocsError`` naming the line."""

from __future__ import annotations

import re
from typing import Callable, Mapping

COMMAND = "python experiments/rebuild_docs.py"
FINDINGS = "FINDINGS.md"
BEGIN = re.compile(r"<!-- generated: (\S+) \(python experiments/rebuild_docs\.py\) -->")
END = re.compile(r"<!-- end generated: (\S+) -->")
MARKER_START = ("<!-- generated:", "<!-- end generated:")


class DocsError(ValueError):
    """FINDINGS.md's generated blocks cannot be rebuilt (unknown name, missing end marker ...)."""


def text_lines(text: str) -> list[str]:
    """Lines with their ends (only "\\n" ends a line: FINDINGS.md holds other Unicode separators verbatim)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def blocks(text: str, writers: Mapping[str, Callable], where: str = FINDINGS) -> list[tuple[str, int, int]]:
    """``(name, begin line index, end line index)`` of every generated block, checked; a block's name
    must be one of ``writers``."""
    found, open_block = [], None
    for i, line in enumerate(text_lines(text)):
        bare = line.rstrip("\r\n")
        if not bare.startswith(MARKER_START):
            continue
        begin, end = BEGIN.fullmatch(bare), END.fullmatch(bare)
        if begin and open_block:
            raise DocsError(f"{where}:{open_block[1] + 1}: generated block {open_block[0]!r} has no end marker "
                            f"'<!-- end generated: {open_block[0]} -->' before line {i + 1}")
        if begin:
            if begin.group(1) not in writers:
                raise DocsError(f"{where}:{i + 1}: unknown generated block {begin.group(1)!r} "
                                f"(known: {', '.join(writers)})")
            open_block = (begin.group(1), i)
        elif end and open_block and end.group(1) == open_block[0]:
            found.append((open_block[0], open_block[1], i))
            open_block = None
        elif end:
            raise DocsError(f"{where}:{i + 1}: end marker of {end.group(1)!r} without its "
                            f"'<!-- generated: {end.group(1)} ({COMMAND}) -->' line"
                            + (f" (block {open_block[0]!r} of line {open_block[1] + 1} is open)" if open_block else ""))
        else:
            raise DocsError(f"{where}:{i + 1}: malformed marker line {bare!r}; the markers are "
                            f"'<!-- generated: NAME ({COMMAND}) -->' and '<!-- end generated: NAME -->'")
    if open_block:
        raise DocsError(f"{where}:{open_block[1] + 1}: generated block {open_block[0]!r} has no end marker "
                        f"'<!-- end generated: {open_block[0]} -->'")
    return found


def render(text: str, writers: Mapping[str, Callable[[object], str]], build, where: str = FINDINGS) -> str:
    """``text`` with every generated block's content replaced by ``writers[name](build)``; the rest kept
    byte for byte."""
    lines = text_lines(text)
    spans = blocks(text, writers, where)
    out, pos = [], 0
    for name, begin, end in spans:
        body = writers[name](build)
        out += lines[pos:begin + 1] + [body if body.endswith("\n") else body + "\n"]
        pos = end
    return "".join(out + lines[pos:])
