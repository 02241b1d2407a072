"""The run directory's files: written atomically with a checksum, read back verified. Imports no jax.

Layout of a run directory (``experiments/*.py --out RUN``)::

    RUN/run.json              identity (every setting that changes results), versions, commit, devices
    RUN/random_scores.json    uniform-random return per task (the normalisation's 0)
    RUN/<group>/cells.json    the group's cells (lag depth, seed, traced knobs): the row-count reference
    RUN/<group>/curves.csv    one row per cell x chunk
    RUN/<group>/scores.csv    one row per cell; its presence marks the group finished
    RUN/<group>/staleness.npz  samples by realised age per chunk x cell (``load_staleness``)
    RUN/<group>/phase_returns.npz, RUN/<group>/checkpoint/   while the group runs
    RUN/run.shard-I-of-N.json, RUN/<group>/shard-I-of-N/    a sweep split into shards (``--shard I/N``)
    RUN/rerun/<group>/cell-K/  one cell re-run alone (``--cell K``); never read as part of the sweep
    RUN/tensorboard/           live metrics, with ``--tensorboard`` only (never read back)
    RUN/wandb/, RUN/videos/    W&B's files (``--wandb``), MP4s of a cell (``--capture-video``); never read back

Every table ``NAME.csv`` is a plain CSV (``pandas.read_csv(path)`` reads its rows and types) with its
checksum beside it in ``NAME.csv.sha256`` (``rows=N sha256=HEX``, the hash of the CSV's bytes); tables
written before the sidecar existed end with that line as a footer ``# vaco_jax rows=N sha256=HEX``
and are read the same way. Every JSON file carries ``"sha256"`` of its canonical content, every
``.npz`` a ``__sha256__`` array. A file that fails its check, lacks its checksum, or whose row count
disagrees with ``cells.json`` raises :class:`ResultsError` naming the file and what is wrong (exit
code 3 at the command line); nothing is ever read as if healthy. Writes go to a temporary name in the same folder,
are flushed to disk and renamed, so a crash or a full disk leaves the old file or the new one, and the
temporary file is removed on failure.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from typing import Sequence

import numpy as np

EXIT_BAD_INPUT = 2
EXIT_DAMAGED = 3
FOOTER = "# vaco_jax"  # the checksum line of a table written before the sidecar existed
CHECKSUM_SUFFIX = ".sha256"  # NAME.csv's checksum lives in NAME.csv.sha256


class ResultsError(RuntimeError):
    """A result file is damaged, truncated, inconsistent with its manifest, or missing."""


# ----------------------------------------------------------------------------- atomic writes

def _tmp_name(path: str) -> str:
    """A temporary name no other writer uses, even a process with the same id on another machine
    writing into the same shared folder (shards of one sweep run as jobs of a cluster)."""
    import secrets
    import socket

    return f"{path}.tmp.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}"


def atomic_write_bytes(path: str, data: bytes) -> None:
    tmp = _tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def atomic_copy(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` so that a reader (or an interrupted copy) never sees a partial file; a
    table's checksum file travels with it (written first, like :func:`write_table`)."""
    if os.path.exists(src + CHECKSUM_SUFFIX):
        with open(src + CHECKSUM_SUFFIX, "rb") as f:
            atomic_write_bytes(dst + CHECKSUM_SUFFIX, f.read())
    with open(src, "rb") as f:
        atomic_write_bytes(dst, f.read())
    if not os.path.exists(src + CHECKSUM_SUFFIX) and os.path.exists(dst + CHECKSUM_SUFFIX):
        os.remove(dst + CHECKSUM_SUFFIX)  # a file without one (an old-format table: its footer) replaced a table


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------- tables

def cell_text(v) -> str:
    """A table cell's text: '' for NaN (an empty cell reads back as NaN), else ``str(v)``."""
    if isinstance(v, float) and math.isnan(v):
        return ""
    return str(v)


def rows_to_csv(rows: Sequence[dict]) -> str:
    """Plain CSV text of ``rows`` (union of their columns, in first-seen order)."""
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: cell_text(v) for k, v in row.items()} for row in rows)
    return buf.getvalue()


def checksum_line(rows: int, body: str) -> str:
    return f"rows={rows} sha256={_sha(body.encode())}\n"


def write_table(path: str, rows: Sequence[dict]) -> None:
    """``path`` as a plain CSV and its checksum in ``path.sha256``. The checksum is written first, so a
    table that exists always has one (its own, or — after a crash between the two renames — the
    next version's, which reads as damaged, never as healthy)."""
    body = rows_to_csv(rows)
    atomic_write_text(path + CHECKSUM_SUFFIX, checksum_line(len(rows), body))
    atomic_write_text(path, body)


def _column_parser(values: list[str]):
    present = [v for v in values if v != ""]
    if present and all(v in ("True", "False") for v in present):
        return lambda v: float("nan") if v == "" else v == "True"
    try:
        [int(v) for v in present]
        return lambda v: float("nan") if v == "" else int(v)
    except ValueError:
        pass
    try:
        [float(v) for v in present]
        return lambda v: float("nan") if v == "" else float(v)
    except ValueError:
        return lambda v: float("nan") if v == "" else v


def _checksum_fields(path: str, line: str, what: str) -> tuple[int, str]:
    try:
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        return int(fields["rows"]), fields["sha256"]
    except (ValueError, KeyError):
        raise ResultsError(f"{path}: unreadable {what} {line.strip()!r}") from None


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing") from None


def _verified_body(path: str, retry: bool = True) -> tuple[str, int]:
    text = _read_bytes(path).decode(errors="replace")
    lines = text.splitlines(keepends=True)
    if lines and lines[-1].startswith(FOOTER):  # a table written before the checksum moved beside it
        rows, digest = _checksum_fields(path, lines[-1], "checksum footer")
        body = "".join(lines[:-1])
    else:
        try:
            line = _read_bytes(path + CHECKSUM_SUFFIX).decode(errors="replace")
        except ResultsError:
            raise ResultsError(f"{path}: no checksum ({os.path.basename(path)}{CHECKSUM_SUFFIX} is missing beside "
                               "it: the table was copied without it, edited, or written by another program)") from None
        rows, digest = _checksum_fields(path, line, f"checksum file {os.path.basename(path)}{CHECKSUM_SUFFIX}")
        body = text
    if _sha(body.encode()) != digest:
        if retry:  # read while a writer was between its two renames: read once more
            import time

            time.sleep(0.2)
            return _verified_body(path, retry=False)
        raise ResultsError(f"{path}: checksum mismatch (the file was changed or damaged after it was written)")
    return body, rows


def read_table(path: str, expect_rows: int | None = None) -> list[dict]:
    """Rows of a table written by :func:`write_table`, checksum and row count verified; each column
    gets one type (bool, int, float or str) from all of its values; empty cells are NaN."""
    body, rows = _verified_body(path)
    reader = csv.DictReader(io.StringIO(body))
    raw = list(reader)
    if len(raw) != rows:
        raise ResultsError(f"{path}: {len(raw)} rows, its footer says {rows}")
    if expect_rows is not None and rows != expect_rows:
        raise ResultsError(f"{path}: {rows} rows, expected {expect_rows} (from cells.json)")
    columns = reader.fieldnames or []
    parsers = {c: _column_parser([r[c] for r in raw]) for c in columns}
    return [{c: parsers[c](r[c]) for c in columns} for r in raw]


def verified_text(path: str) -> tuple[str, int]:
    """The text of a file that is not a plain table but carries a table's checksum beside it (written
    with :func:`checksum_line`: an age histogram with its comment lines), verified, and the row count
    its checksum records; :class:`ResultsError` naming the file when it is missing, lacks its checksum or
    fails it."""
    return _verified_body(path)


def read_csv(path: str) -> list[dict]:
    """Alias of :func:`read_table` (verified)."""
    return read_table(path)


def read_frame(path: str, expect_rows: int | None = None):
    """A verified table as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame(read_table(path, expect_rows))


# ----------------------------------------------------------------------------- JSON and arrays

def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, default=str, allow_nan=False).encode()


def write_json(path: str, obj: dict) -> None:
    """JSON with a ``sha256`` of its canonical content (non-finite floats are written as null)."""
    clean = json.loads(json.dumps(_finite(obj), default=str))
    atomic_write_text(path, json.dumps({**clean, "sha256": _sha(_canonical(clean))}, indent=1, allow_nan=False))


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return _finite(obj.item())
    return obj


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(obj, dict) or "sha256" not in obj:
        raise ResultsError(f"{path}: no checksum (truncated, edited, or written by another version)")
    digest = obj.pop("sha256")
    if _sha(_canonical(obj)) != digest:
        raise ResultsError(f"{path}: checksum mismatch (the file was changed or damaged after it was written)")
    return obj


def save_npz(path: str, **arrays) -> None:
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    digest = _sha(b"".join(k.encode() + arrays[k].tobytes() for k in sorted(arrays)))
    buf = io.BytesIO()
    np.savez(buf, __sha256__=np.array(digest), **arrays)
    atomic_write_bytes(path, buf.getvalue())


def load_npz(path: str) -> dict:
    try:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing") from None
    except Exception as e:  # zip or array damage
        raise ResultsError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    digest = str(arrays.pop("__sha256__", ""))
    if _sha(b"".join(k.encode() + arrays[k].tobytes() for k in sorted(arrays))) != digest:
        raise ResultsError(f"{path}: checksum mismatch")
    return arrays


# ----------------------------------------------------------------------------- a run directory

RERUN = "rerun"  # RUN/rerun/: cells re-run alone, kept apart from the sweep's own results


def run_dirs_problem(run_dirs) -> str | None:
    """Why a list of run directories given on a command line cannot be merged, or None."""
    for run_dir in run_dirs:
        if not os.path.isdir(run_dir):
            return f"{run_dir} is not a directory"
    if len(set(map(os.path.realpath, run_dirs))) != len(run_dirs):
        return "a run directory is given twice (its cells would count twice)"
    return None


def _dirs(run_dirs) -> list[str]:
    return [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else [str(d) for d in run_dirs]


def group_dirs(run_dirs) -> list[str]:
    """Every group directory (one holding ``cells.json``) under one run directory or several, sorted
    within each; a group split into shards is found in its ``shard-I-of-N/`` subdirectories. The
    re-runs of single cells under ``RUN/rerun/`` are not part of the run and are skipped."""
    out: list[str] = []
    for run_dir in _dirs(run_dirs):
        found = []
        for root, dirs, files in os.walk(run_dir):
            if os.path.normpath(root) == os.path.normpath(run_dir) and RERUN in dirs:
                dirs.remove(RERUN)
            if "cells.json" in files:
                found.append(root)
            elif "scores.csv" in files:  # a finished group that lost its manifest is named, never skipped
                raise ResultsError(f"{os.path.join(root, 'cells.json')}: missing beside scores.csv; run the study's "
                                   "command again to rebuild it from the plan, or restore it")
        out.extend(d for d in sorted(found) if d not in out)
    return out


def read_cells(group_dir: str) -> list[dict]:
    return read_json(os.path.join(group_dir, "cells.json"))["cells"]


def write_cells(group_dir: str, cells: list[dict]) -> None:
    write_json(os.path.join(group_dir, "cells.json"), {"cells": cells})


SCORE_COLUMNS = ("final_eval_return", "auc_eval_return", "train_return_last5pct", "diverged", "unstable_steps",
                 "nonfinite")


def identifies_cell(column: str) -> bool:
    """Whether a score-row column identifies its cell (task, method, group tags, lag depth, seed,
    traced knobs) rather than holding a score or a diagnostic's mean."""
    return column not in SCORE_COLUMNS and not column.startswith("mean_")


def cell_key(row: dict) -> str:
    """What identifies a cell in a score row: every column that :func:`identifies_cell`."""
    return json.dumps({k: str(v) for k, v in sorted(row.items()) if identifies_cell(k)})


def load_scores(run_dirs) -> list[dict]:
    """Every finished group's score rows, each table verified against its ``cells.json``, from one
    run directory or several (merged: e.g. the shards of one sweep written into separate
    directories). A cell found twice (a directory given twice, a sweep run both whole and in shards
    into one directory, shards of two different splits) raises ResultsError naming both files; it
    would otherwise be counted as two runs."""
    rows: list[dict] = []
    seen: dict = {}
    for g in group_dirs(run_dirs):
        path = os.path.join(g, "scores.csv")
        if os.path.exists(path):
            table = read_table(path, expect_rows=len(read_cells(g)))
            for row in table:
                key = cell_key(row)
                if key in seen and seen[key] != path:
                    raise ResultsError(f"the cell {key} is in both {seen[key]} and {path}; merge each cell once "
                                       "(one split into shards, each directory once)")
                seen[key] = path
            rows.extend(table)
    return rows


def load_curves(run_dirs) -> list[dict]:
    """Every group's learning-curve rows (finished or not), each table verified; one run directory or several."""
    rows: list[dict] = []
    for g in group_dirs(run_dirs):
        path = os.path.join(g, "curves.csv")
        if os.path.exists(path):
            table = read_table(path)
            if len(table) % max(1, len(read_cells(g))):
                raise ResultsError(f"{path}: {len(table)} rows is not a whole number of chunks of "
                                   f"{len(read_cells(g))} cells (cells.json)")
            rows.extend(table)
    return rows


def load_random_scores(run_dirs) -> dict | None:
    """The uniform-random return per task from ``random_scores.json`` of one run directory or several
    (the first directory that has a task wins); None when none has the file."""
    found = None
    for run_dir in _dirs(run_dirs):
        path = os.path.join(run_dir, "random_scores.json")
        if os.path.exists(path):
            found = found or {}
            for task, value in read_json(path).items():
                found.setdefault(task, value)
    return found


LEARNER_COST = "learner_cost.csv"  # a run directory's per-phase learner timings (experiments/study.py cost)


def load_costs(run_dirs) -> list[dict]:
    """The ``learner_cost.csv`` rows of one run directory or several (verified; none when absent)."""
    rows = []
    for run_dir in _dirs(run_dirs):
        path = os.path.join(run_dir, LEARNER_COST)
        if os.path.exists(path):
            rows += read_table(path)
    return rows


def load_staleness(run_dir: str) -> dict[str, dict]:
    """Every group's realised staleness histogram (finished or not), verified.

    Returns ``{group path relative to run_dir: {"cells": cells.json rows, "counts": int array
    [chunks, cells, buffer_capacity]}}``: ``counts[c, i, a]`` is the number of samples of chunk ``c``
    of cell ``i`` whose behaviour snapshot was ``a`` versions behind the learner (docs/diagnostics.md).
    A group that is still running may hold one chunk fewer here than in its ``curves.csv``.
    """
    out: dict[str, dict] = {}
    for g in group_dirs(run_dir):
        path = os.path.join(g, "staleness.npz")
        if not os.path.exists(path):
            continue
        cells = read_cells(g)
        counts = load_npz(path)["counts"]
        if counts.ndim != 3 or counts.shape[1] != len(cells):
            raise ResultsError(f"{path}: counts of shape {counts.shape}, expected [chunks, {len(cells)} cells "
                               "(cells.json), ages]")
        out[os.path.relpath(g, run_dir)] = {"cells": cells, "counts": counts}
    return out


def scores_frame(run_dir: str):
    """``load_scores`` as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame(load_scores(run_dir))


def curves_frame(run_dir: str):
    import pandas as pd

    return pd.DataFrame(load_curves(run_dir))


def has_scores(group: str) -> bool:
    """A group's ``scores.csv`` is there, or every part of its split (``part-J-of-M/``) has one."""
    if os.path.exists(os.path.join(group, "scores.csv")):
        return True
    parts = [d for d in (os.listdir(group) if os.path.isdir(group) else []) if d.startswith("part-")]
    counts = {d.rsplit("-of-", 1)[-1] for d in parts}
    return len(counts) == 1 and all(os.path.exists(os.path.join(group, f"part-{j}-of-{m}", "scores.csv"))
                                    for m in map(int, counts) for j in range(m))


def check_design_finished(path: str) -> None:
    """A design whose run has finished (its ``summary.csv`` is written only then) holds the scores of
    every group its records name (``run.json``; a shard's ``run.shard-I-of-N.json``, its groups'
    ``shard-I-of-N/``): one lost is a one-line error naming it, never a task left out as unfinished."""
    if not os.path.exists(os.path.join(path, "summary.csv")):
        return
    lost = []
    for name in sorted(os.listdir(path)):
        if name.startswith("run.") and name.endswith(".json"):
            shard = name[len("run."):-len(".json")]
            for subdir in read_json(os.path.join(path, name)).get("identity", {}):
                group = os.path.join(path, subdir, *([shard] if shard.startswith("shard-") else []))
                if not has_scores(group):
                    lost.append(os.path.join(group, "scores.csv"))
    if lost:
        raise ResultsError(f"{path}: the design has finished (summary.csv) but {len(lost)} of its groups have no "
                           f"scores.csv: {', '.join(lost)}; restore them (git checkout -- {path}) or run the design "
                           "again")


def placed_rows(base: str, names: tuple[str, ...]) -> list[dict]:
    """Every run under ``base`` whose folder holds a ``scores.csv``, each row with ``names`` read from the
    last components of its folder's path (e.g. ``("arm", "lag_model")`` for ``<task>/<arm>/<lag model>``)."""
    out = []
    for root, _, files in sorted(os.walk(base)) if os.path.isdir(base) else []:
        if "scores.csv" in files:
            place = os.path.relpath(root, base).split(os.sep)[-len(names):]
            out += [{**r, **dict(zip(names, place))} for r in read_table(os.path.join(root, "scores.csv"))]
    return out
