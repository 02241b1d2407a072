"""Age histograms on disk: how many samples a learner consumed at each age (its version at the update
minus the sample's behaviour version), as a small CSV that the ``ages`` lag model takes as its
``age_weights`` (``--age-histogram FILE``; several files: one cell each, one grid).

The format, written by the real actor-learner (``driver.actor_learner``) and easy to export from any
other system::

    # lines starting with '#' are comments (where the histogram came from)
    age,count
    0,5120
    1,2048
    3,17

Ages are non-negative integers, each at most once; a missing age has count 0; counts are non-negative
numbers (integers, or fractions for an exported distribution), not all zero. A real run writes its
histogram with a checksum beside it (``age_histogram.csv.sha256``, as a results table's), which the
studies that read it verify; a file exported from elsewhere needs none.
"""

from __future__ import annotations

import math
import os

from vaco_jax.errors import ConfigError

HEADER = "age,count"


def read_age_histogram(path: str, checksum: bool = False) -> tuple[float, ...]:
    """The counts of ages 0, 1, ..., up to the largest age with a positive count (trailing zeros
    dropped), or ConfigError naming the file, the line and what is wrong. With ``checksum`` the file
    must carry the checksum a real run writes beside it (``NAME.csv.sha256``, as a table's) and match
    it and its count of ages: a ResultsError naming the file otherwise."""
    where = f"age_histogram: {path}"
    if checksum:
        from vaco_jax.analysis.results import ResultsError, verified_text

        text, rows = verified_text(path)
    else:
        if not os.path.isfile(path):
            raise ConfigError(f"{where}: no such file (a CSV with the header '{HEADER}')")
        with open(path) as f:
            text = f.read()
    lines = [(i + 1, line.strip()) for i, line in enumerate(text.split("\n"))]
    lines = [(n, line) for n, line in lines if line and not line.startswith("#")]
    if not lines or lines[0][1].replace(" ", "") != HEADER:
        raise ConfigError(f"{where}: the first line that is not a comment must be '{HEADER}'")
    if checksum and len(lines) - 1 != rows:
        raise ResultsError(f"{path}: {len(lines) - 1} ages, its checksum says {rows}")
    counts: dict[int, float] = {}
    for n, line in lines[1:]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            raise ConfigError(f"{where}, line {n}: expected 'age,count', got {line!r}")
        try:
            age_f, count = float(parts[0]), float(parts[1])
        except ValueError:
            raise ConfigError(f"{where}, line {n}: {line!r} is not two numbers") from None
        if not age_f.is_integer() or age_f < 0:
            raise ConfigError(f"{where}, line {n}: age {parts[0]} is not a non-negative integer")
        age = int(age_f)
        if age in counts:
            raise ConfigError(f"{where}, line {n}: age {age} is given twice")
        if not math.isfinite(count) or count < 0:
            raise ConfigError(f"{where}, line {n}: count {parts[1]} is not a finite non-negative number")
        counts[age] = count
    positive = [a for a, c in counts.items() if c > 0]
    if not positive:
        raise ConfigError(f"{where}: every count is zero (nothing to draw ages from)")
    return tuple(float(counts.get(a, 0.0)) for a in range(max(positive) + 1))


def age_histogram_text(counts, comment: str = "") -> str:
    """The CSV text of ``counts[a]`` samples at age ``a`` (every age up to the last, zeros included)."""
    lines = [f"# {c}" for c in comment.splitlines() if c] + [HEADER]
    lines += [f"{a},{_num(c)}" for a, c in enumerate(counts)]
    return "\n".join(lines) + "\n"


def _num(c) -> str:
    c = float(c)
    return str(int(c)) if c.is_integer() else repr(c)


def write_age_histogram(path: str, counts, comment: str = "", checksum: bool = False) -> None:
    """Write ``counts`` atomically (an interrupted write leaves the old file or none); with ``checksum``
    its checksum goes beside it first (``NAME.csv.sha256``: one row per age), as a table's
    (``results.write_table``), for ``read_age_histogram(path, checksum=True)``."""
    from vaco_jax.analysis.results import CHECKSUM_SUFFIX, atomic_write_text, checksum_line

    text = age_histogram_text(counts, comment)
    if checksum:
        atomic_write_text(path + CHECKSUM_SUFFIX, checksum_line(len(counts), text))
    atomic_write_text(path, text)


def histogram_settings(files, fixed: dict, axes: dict) -> tuple[dict, dict]:
    """Fold ``--age-histogram FILE ...`` into a study's fixed settings and sweep axes: one file is
    ``age_weights`` for every cell, several are an ``age_weights`` axis (a cell each, one program).
    Every file is read (and checked) here, before anything is planned."""
    files = tuple(files or ())
    if not files:
        return fixed, axes
    if "age_weights" in fixed or "age_weights" in axes:
        raise ConfigError("age_histogram: give the ages' weights once: --age-histogram, --age-weights or "
                          "--sweep age_weights, not two of them")
    if len(set(files)) != len(files):
        raise ConfigError(f"age_histogram: a file is given twice in {list(files)}")
    weights = [read_age_histogram(p) for p in files]
    if len(weights) == 1:
        return {**fixed, "age_weights": weights[0]}, axes
    if len(set(weights)) != len(weights):
        raise ConfigError(f"age_histogram: two of {list(files)} hold the same histogram")
    return fixed, {**axes, "age_weights": weights}
