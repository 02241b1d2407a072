"""A grid of cells (lag depths x seeds x traced hyper-parameters) as one compiled, vmapped program.

One *group* = one static ``Config`` (task, method, shapes) and a list of cells that differ only in
traced values and seed. The group's program (``program.group_program``: ``jit(vmap(train_chunk))``, its
grid axis split over the local devices by ``shard_map``, each chunk followed by the evaluation, a
program of its own that every group of the same task shares) runs here chunk by chunk, with the
group's hooks (``tracking.group_hooks``) after each. The program also keeps the group's directory: it
resumes from it (``GroupProgram.resume_group``), runs each chunk and writes its curve rows, other
results and a checkpoint (``advance``), so an interrupted sweep resumes from its last chunk, and at the
end the scores and the trained policies (``finish``). Layout of a group directory::

    GROUP/cells.json      the cells (lag_depth, seed, learning_rate, clip_epsilon, tv_budget)
    GROUP/curves.csv      one row per cell x chunk: env steps, eval/train return, diagnostics
    GROUP/staleness.npz   ``counts`` [chunks, cells, buffer_capacity]: each chunk's samples by realised age
    GROUP/scores.csv      one row per cell: final eval, AUC, last-5% train return, diverged, mean diagnostics
    GROUP/checkpoint/     orbax checkpoint of the whole grid carry (removed when the group is done)

``scores.csv`` is written last: its presence marks the group finished. Every file is written to a
temporary name and renamed, so a crash leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Sequence

import numpy as np

from vaco_jax.analysis import results
from vaco_jax.analysis.results import ResultsError
from vaco_jax.core.config import Config
from vaco_jax.core.train import Trainer
from vaco_jax.driver.devices import _warn
from vaco_jax.driver.grid import Cell, Group, PART_RE, _cell_from_row, check_cells, check_max_cells, split_group
from vaco_jax.driver.program import group_program
from vaco_jax.driver.program import (  # noqa: F401  (the rows' and scores' functions, also read from here)
    cell_scores, diagnostic_scores, last_fraction_train_return, mark_nonfinite)
from vaco_jax.driver.provenance import UNRECORDED_SETTINGS
from vaco_jax.driver.tracking import VIDEOS, VideoOptions, WandbOptions, check_tracking, group_hooks
from vaco_jax.errors import ConfigError


def check_max_chunks(max_chunks) -> None:
    if max_chunks is not None and (not isinstance(max_chunks, int) or isinstance(max_chunks, bool) or max_chunks < 1):
        raise ConfigError(f"max_chunks={max_chunks!r} must be a positive integer")


def run_groups(run_dir: str, groups: Sequence[Group], progress: bool = True, max_chunks: int | None = None,
               tensorboard: bool = False, max_cells_per_program: int | None = None,
               wandb: WandbOptions | None = None, capture_video: VideoOptions | None = None) -> bool:
    """Run every group; with ``max_chunks`` each stops after that many chunks (a time-limited job:
    rerun the same command to continue). With ``tensorboard`` each group also writes live metrics to
    ``RUN/tensorboard/GROUP/`` (vaco_jax/driver/live.py); with ``wandb`` W&B runs under ``RUN/wandb/``, with
    ``capture_video`` videos under ``RUN/videos/GROUP/`` (vaco_jax/driver/tracking.py). With
    ``max_cells_per_program`` a group with more cells runs as parts ``GROUP/part-J-of-M/``, one program
    each. Returns whether every group finished."""
    check_max_chunks(max_chunks)
    check_max_cells(max_cells_per_program)
    check_tracking([g.config for g in groups], [len(g.cells) for g in groups], wandb, capture_video)
    if wandb is not None:
        wandb = dataclasses.replace(wandb, dir=wandb.dir or run_dir)
    finished = True
    for whole in groups:
        parts = split_group(whole, max_cells_per_program)
        check_layout(run_dir, whole, len(parts))
        for g in parts:
            video = None if capture_video is None else dataclasses.replace(
                capture_video, dir=os.path.join(capture_video.dir or os.path.join(run_dir, VIDEOS), g.subdir))
            rows = run_group(g.config, list(g.cells), os.path.join(run_dir, g.subdir), progress=progress,
                             label=g.label or g.subdir, tags=dict(g.tags), max_chunks=max_chunks,
                             tensorboard_dir=os.path.join(run_dir, "tensorboard", g.subdir) if tensorboard else None,
                             wandb=wandb, capture_video=video)
            finished = finished and rows is not None
    if not finished:
        print(f"stopped after --max-chunks {max_chunks}; rerun the same command to continue")
    return finished


def _parts_on_disk(group_dir: str) -> set:
    import re

    if not os.path.isdir(group_dir):
        return set()
    return {int(m.group(2)) for f in os.listdir(group_dir) if (m := re.fullmatch(PART_RE, f))}


def check_layout(run_dir: str, group: Group, parts: int) -> None:
    """A group already started as one program cannot continue as parts, nor parts of another split
    (the cells would run twice)."""
    group_dir = os.path.join(run_dir, group.subdir)
    on_disk = _parts_on_disk(group_dir)
    whole = os.path.exists(os.path.join(group_dir, "cells.json"))
    if parts > 1 and whole:
        raise ConfigError(f"max_cells_per_program: {group_dir} was started as one program; continue it without "
                          "--max-cells-per-program, or remove that directory to run it in parts")
    if on_disk and on_disk != {parts}:
        was = ", ".join(str(m) for m in sorted(on_disk))
        raise ConfigError(f"max_cells_per_program: {group_dir} holds a split into {was} part(s), this command "
                          f"gives {parts}; use the --max-cells-per-program it was started with")


def group_finished(group_dir: str) -> bool:
    """A group is finished when its ``scores.csv`` exists, or every part of its split has one."""
    if os.path.exists(os.path.join(group_dir, "scores.csv")):
        return True
    counts = _parts_on_disk(group_dir)
    if len(counts) != 1:
        return False
    m = counts.pop()
    return all(os.path.exists(os.path.join(group_dir, f"part-{j}-of-{m}", "scores.csv")) for j in range(m))


def run_group(config: Config, cells: list[Cell], group_dir: str, progress: bool = True,
              checkpoint: bool = True, trainer: Trainer | None = None, label: str = "",
              tags: dict | None = None, shard: bool = True, max_chunks: int | None = None,
              tensorboard_dir: str | None = None, progress_fn: Callable[[int, dict], Any] | None = None,
              wandb: WandbOptions | None = None, capture_video: VideoOptions | None = None) -> list[dict] | None:
    """Run (or resume, or skip when finished) one group; returns its score rows.

    Resuming verifies every file against the checkpoint (row counts per chunk, checksums); a damaged
    checkpoint falls back to the previous one, and when no checkpoint or no consistent set of files
    is left the group restarts from its first chunk (the run is deterministic, so the numbers are the
    same) with a one-line warning. A damaged ``scores.csv`` of a finished group raises ResultsError.

    ``shard=False`` keeps the grid on one device. ``max_chunks`` stops after that many chunks in
    this call (returns None; the next call resumes from the checkpoint), for time-sliced jobs.

    ``tags`` are extra columns written into every row (e.g. ``num_epochs`` for a forward-lag sweep).

    ``tensorboard_dir``: also write each chunk's rows and staleness histograms as TensorBoard event
    files, one run per cell in ``tensorboard_dir/cell-<i>_B<lag>_s<seed>/`` (vaco_jax/driver/live.py).

    After every chunk, once its files and checkpoint are written (vaco_jax/driver/tracking.py):
    ``progress_fn(env_steps, metrics)`` is called once per cell, in cell order, with a copy of the cell's
    ``curves.csv`` row (``cell``, ``chunk``, returns, diagnostics); an exception raised in it reaches the
    caller and the same call resumes from the next chunk. ``wandb``: the chunk logged to one W&B run per
    cell (files in ``wandb.dir``/wandb/, default the group directory). ``capture_video``: an MP4 of cell
    ``capture_video.cell`` in ``capture_video.dir/cell-K/chunk-C.mp4`` (default dir: ``GROUP/videos``).
    None of them changes a number.
    """
    tags = dict(tags or {})
    check_cells(cells, group_dir)
    hooks = group_hooks(config, cells, label, tags, progress_fn, wandb, capture_video, group_dir)
    scores_path = os.path.join(group_dir, "scores.csv")
    own = [c.row() for c in cells]  # each cell's identifying columns (lag depth, seed, traced knobs)
    cell_rows = json.loads(json.dumps(own, default=str))
    if os.path.exists(scores_path) and not os.path.exists(os.path.join(group_dir, "cells.json")):
        _rebuild_cells(group_dir, scores_path, cell_rows)
    if os.path.exists(os.path.join(group_dir, "cells.json")):
        old_rows = results.read_cells(group_dir)
        if old_rows != cell_rows:
            return _extend_group(config, cells, cell_rows, old_rows, group_dir, progress=progress,
                                 checkpoint=checkpoint, trainer=trainer, label=label, tags=tags, shard=shard,
                                 max_chunks=max_chunks, tensorboard_dir=tensorboard_dir, progress_fn=progress_fn,
                                 wandb=wandb, capture_video=capture_video)
    if os.path.exists(scores_path):
        rows = results.read_table(scores_path, expect_rows=len(cells))
        check_finished_group(group_dir, config)
        return rows
    from tqdm.auto import tqdm

    os.makedirs(group_dir, exist_ok=True)
    results.write_cells(group_dir, cell_rows)
    program = group_program(config, cells, trainer, devices=None if shard else 1)
    state, start, history = program.resume_group(group_dir, checkpoint)
    bar = tqdm(total=config.num_evals, initial=start, disable=not progress, unit="chunk",
               desc=label or f"{config.env}/{config.method} x{len(cells)}")
    stop = config.num_evals if max_chunks is None else min(config.num_evals, start + max_chunks)
    live = _live_writer(tensorboard_dir, cells)
    heads = [{"env": config.env, "method": config.method, **tags, **row} for row in own]
    skip = [list(tags) + list(row) for row in own]  # each row's identifying columns
    failed = True
    try:
        for chunk in range(start, stop):
            state, rows, metrics = program.advance(group_dir, history, state, chunk, heads, checkpoint)
            staleness = np.asarray(metrics.staleness_counts)[: len(cells)]
            if live is not None:  # after the chunk's files, as the hooks
                for i, row in enumerate(rows):
                    live.write(i, row, staleness[i], skip=skip[i])
            if hooks.active:  # after the chunk's files: a hook that fails leaves a run that resumes
                hooks.after_chunk(chunk, rows, staleness, program, state, skip)
            bar.update(1)
            evals = np.array([row["eval_return"] for row in rows], float)
            evals = evals[np.isfinite(evals)]
            bar.set_postfix(eval=f"{evals.mean():.0f}" if len(evals) else "n/a",
                            sps=f"{rows[0]['grid_steps_per_second']:.0f}")
        failed = False
    finally:
        bar.close()
        if live is not None:
            live.close()
        hooks.close(failed)
    if stop < config.num_evals:
        return None
    return program.finish(group_dir, history, state, heads, checkpoint)


def _rebuild_cells(group_dir: str, scores_path: str, cell_rows: list[dict]) -> None:
    """A finished group whose ``cells.json`` is gone: rebuilt from the plan when its scores hold exactly
    the planned cells (lag depth, seed and traced knobs, in order), else named (exit 3)."""
    rows = results.read_table(scores_path)
    keys = [tuple(sorted(c)) for c in cell_rows]
    found = [{k: r.get(k) for k in key} for r, key in zip(rows, keys)]
    same = len(rows) == len(cell_rows) and all(
        all(str(f[k]) == str(c[k]) or _same_number(f[k], c[k]) for k in c) for f, c in zip(found, cell_rows))
    if not same:
        raise ResultsError(f"{os.path.join(group_dir, 'cells.json')}: missing, and the group's scores.csv does not "
                           "hold the planned cells; restore it, or delete the group directory to run it again")
    results.write_cells(group_dir, cell_rows)
    _warn(f"{group_dir}: cells.json was missing; rebuilt from the plan (the scores hold exactly its cells)")


def _engine_of(config: Config, backend) -> str:
    try:
        return config.replace(backend=backend).physics_backend
    except (ConfigError, TypeError):
        return str(backend)


def _same_number(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def check_group_settings(group_dir: str, config: Config) -> None:
    """Read-only: a group directory that records its settings (``config.json``) was run with ``config``'s;
    otherwise a ConfigError naming the settings that differ. Nothing to check where none is recorded.
    Commands call it for every group before they write anything (``study.run_study``)."""
    from vaco_jax.driver.policies import CONFIG

    if os.path.exists(os.path.join(group_dir, CONFIG)):
        _compare_settings(group_dir, config)


def check_finished_group(group_dir: str, config: Config) -> None:
    """A finished group holds its settings (``config.json``, equal to the command's) and its trained
    policies (``policies.npz``); anything missing, unreadable or different is named before it is reported."""
    from vaco_jax.driver.policies import CONFIG, POLICIES

    path = os.path.join(group_dir, CONFIG)
    if not os.path.exists(path):
        raise ResultsError(f"{path}: missing in a finished group, so nothing says which settings produced its scores; "
                           "restore it, or delete the group directory to run it again")
    _compare_settings(group_dir, config)
    if not os.path.exists(os.path.join(group_dir, POLICIES)):
        raise ResultsError(f"{os.path.join(group_dir, POLICIES)}: missing in a finished group (its trained policies); "
                           "restore it, or delete the group directory to run it again")
    results.load_npz(os.path.join(group_dir, POLICIES))  # a damaged file is named (its checksum), not passed over


def _compare_settings(group_dir: str, config: Config) -> None:
    from vaco_jax.driver.policies import CONFIG

    recorded = results.read_json(os.path.join(group_dir, CONFIG))  # a damaged file is a ResultsError naming it
    now = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    recorded = {**UNRECORDED_SETTINGS, **recorded}
    if "backend" in recorded:  # None means the task's default engine: compare the engines meant
        recorded["backend"], now["backend"] = (_engine_of(config, recorded["backend"]),
                                               _engine_of(config, now["backend"]))
    diff = [k for k in now if k in recorded and recorded[k] != now[k]]
    if diff:
        shown = ", ".join(f"{k}: {recorded[k]!r} there, {now[k]!r} now" for k in diff[:4])
        raise ConfigError(f"{group_dir} was run with other settings ({shown}); run with the same settings or "
                          "choose another --out")


def _extend_group(config, cells, cell_rows, old_rows, group_dir, **kwargs):
    """The manifest is extensible: a grid that holds every cell of the group's ``cells.json`` plus new
    ones (more seeds, lag depths or knob values) runs the new cells as a sub-group
    ``GROUP/more_<hash>/`` (its own program) and returns the rows of both; anything else is an error."""
    import hashlib

    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    old_keys = {key(r) for r in old_rows}
    if not old_keys <= {key(r) for r in cell_rows}:
        raise ValueError(f"{group_dir} holds a different grid (cells.json has cells this command lacks); "
                         "give every cell it holds (plus any new ones) or choose another --out")
    new = [c for c, r in zip(cells, cell_rows) if key(r) not in old_keys]
    old = [_cell_from_row(r) for r in old_rows]
    digest = hashlib.sha1("".join(sorted(key(c.row()) for c in new)).encode()).hexdigest()[:8]
    first = run_group(config, old, group_dir, **kwargs)
    if kwargs.get("tensorboard_dir"):
        kwargs = {**kwargs, "tensorboard_dir": os.path.join(kwargs["tensorboard_dir"], f"more_{digest}")}
    if kwargs.get("capture_video") is not None:
        video = kwargs["capture_video"]
        where = video.dir or os.path.join(group_dir, VIDEOS)
        kwargs = {**kwargs, "capture_video": dataclasses.replace(video, dir=os.path.join(where, f"more_{digest}"))}
    kwargs["label"] = f"{kwargs.get('label') or ''}/more_{digest}".lstrip("/")
    more = run_group(config, new, os.path.join(group_dir, f"more_{digest}"), **kwargs)
    return None if first is None or more is None else first + more


def _live_writer(tensorboard_dir: str | None, cells: Sequence[Cell]):
    if not tensorboard_dir:
        return None
    from vaco_jax.driver.live import GroupWriter, cell_run_name

    return GroupWriter(tensorboard_dir, [cell_run_name(i, c.lag_depth, c.seed) for i, c in enumerate(cells)])
