"""A grid of cells (lag depths x seeds x traced hyper-parameters) as one compiled, vmapped program.

One *group* = one static ``Config`` (task, method, shapes) and a list of cells that differ only in
traced values and seed. The group runs as ``jit(vmap(run_chunk))`` with the grid axis sharded over
all local devices; between chunks the host writes results and a checkpoint, so an interrupted sweep
resumes from its last chunk. Layout of a group directory::

    GROUP/cells.json      the cells (lag_depth, seed, learning_rate, clip_epsilon, tv_budget)
    GROUP/curves.csv      one row per cell x chunk: env steps, eval/train return, diagnostics
    GROUP/scores.csv      one row per cell: final eval, AUC, last-5% train return, diverged, mean diagnostics
    GROUP/checkpoint/     orbax checkpoint of the whole grid carry (removed when the group is done)

``scores.csv`` is written last: its presence marks the group finished. Every file is written to a
temporary name and renamed, so a crash leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import shutil
import time
from typing import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.config import Config, make_traced, stack_traced
from vaco_jax.train import Trainer, chunk_summary, make_train

CELL_FIELDS = ("lag_depth", "seed", "learning_rate", "clip_epsilon", "tv_budget")


@dataclasses.dataclass(frozen=True)
class Cell:
    lag_depth: int
    seed: int
    learning_rate: float = 3e-4
    clip_epsilon: float = 0.2
    tv_budget: float = 0.2


def grid(lag_depths: Iterable[int], seeds: Iterable[int], **traced) -> list[Cell]:
    """Cartesian product of lag depths x seeds (x any list-valued traced field)."""
    lists = {k: (v if isinstance(v, (list, tuple)) else [v]) for k, v in traced.items()}
    cells = [Cell(lag_depth=b, seed=s) for b in lag_depths for s in seeds]
    for name, values in lists.items():
        cells = [dataclasses.replace(c, **{name: v}) for c in cells for v in values]
    return cells


# ----------------------------------------------------------------------------- atomic files

def atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rows_to_csv(rows: Sequence[dict]) -> str:
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def read_csv(path: str) -> list[dict]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        parsed = {}
        for k, v in row.items():
            if v == "":
                parsed[k] = float("nan")
                continue
            try:
                parsed[k] = float(v) if any(c in v for c in ".eEn") else int(v)
            except ValueError:
                parsed[k] = {"True": True, "False": False}.get(v, v)
        out.append(parsed)
    return out


# ----------------------------------------------------------------------------- sharding

def _grid_sharding():
    """Shard the leading (grid) axis over all local devices."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("grid",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("grid"))


def _pad(cells: list[Cell], multiple: int) -> list[Cell]:
    extra = (-len(cells)) % multiple
    return cells + [cells[-1]] * extra


# ----------------------------------------------------------------------------- scores

def cell_scores(curve_rows: list[dict], phase_returns: np.ndarray, phase_counts: np.ndarray,
                last_fraction: float = 0.05, evaluated: bool = True) -> dict:
    """Scores of one cell (SPEC §7): final eval return, area under the eval curve, last-5% train return.

    A cell is diverged when its parameters became non-finite (the trainer's flag) or, when it was
    evaluated (``evaluated``), its final evaluation return is not finite.
    """
    evals = np.array([r["eval_return"] for r in curve_rows], float)
    n_last = max(1, int(math.ceil(last_fraction * len(phase_returns))))
    ret, cnt = phase_returns[-n_last:].sum(), phase_counts[-n_last:].sum()
    diverged = any(bool(r["diverged"]) for r in curve_rows) or (
        evaluated and not np.isfinite(evals[-1] if len(evals) else np.nan))
    return {
        "final_eval_return": float(evals[-1]) if len(evals) else float("nan"),
        "auc_eval_return": float(np.mean(evals)) if len(evals) else float("nan"),
        "train_return_last5pct": float(ret / cnt) if cnt > 0 else float("nan"),
        "diverged": bool(diverged),
    }


# ----------------------------------------------------------------------------- one group

def run_group(config: Config, cells: list[Cell], group_dir: str, progress: bool = True,
              checkpoint: bool = True, trainer: Trainer | None = None, label: str = "",
              tags: dict | None = None, shard: bool = True, max_chunks: int | None = None) -> list[dict] | None:
    """Run (or resume, or skip when finished) one group; returns its score rows.

    ``shard=False`` keeps the grid on one device. ``max_chunks`` stops after that many chunks in
    this call (returns None; the next call resumes from the checkpoint), for time-sliced jobs.

    ``tags`` are extra columns written into every row (e.g. ``num_epochs`` for a forward-lag sweep).
    """
    tags = dict(tags or {})
    scores_path = os.path.join(group_dir, "scores.csv")
    cells_json = json.dumps([dataclasses.asdict(c) for c in cells], indent=1)
    cells_path = os.path.join(group_dir, "cells.json")
    if os.path.exists(cells_path) and open(cells_path).read() != cells_json:
        raise ValueError(f"{group_dir} holds a different grid (cells.json differs); use another run directory")
    if os.path.exists(scores_path):
        return read_csv(scores_path)
    from tqdm.auto import tqdm

    from vaco_jax import checkpoint as ckpt

    os.makedirs(group_dir, exist_ok=True)
    atomic_write_text(cells_path, cells_json)

    trainer = trainer or make_train(config)
    padded = _pad(cells, len(jax.devices())) if shard else list(cells)
    keys = jnp.stack([jax.random.PRNGKey(c.seed) for c in padded])
    traced = stack_traced([make_traced(config, c.lag_depth, c.learning_rate, c.clip_epsilon, c.tv_budget)
                           for c in padded])
    if shard and len(jax.devices()) > 1:
        sharding = _grid_sharding()
        keys, traced = jax.device_put((keys, traced), sharding)
    init = jax.jit(jax.vmap(trainer.init))
    run_chunk = jax.jit(jax.vmap(trainer.run_chunk))

    ckpt_dir = os.path.join(group_dir, "checkpoint")
    curves_path = os.path.join(group_dir, "curves.csv")
    phase_path = os.path.join(group_dir, "phase_returns.npz")
    restored = ckpt.restore_checkpoint(ckpt_dir, jax.eval_shape(init, keys, traced)) if checkpoint else None
    if restored is not None:
        state, start, _ = restored
        curve_rows = [r for r in read_csv(curves_path) if r["chunk"] < start] if os.path.exists(curves_path) else []
        saved = np.load(phase_path)
        phase_ret, phase_cnt = list(saved["returns"][:start]), list(saved["counts"][:start])
    else:
        state, start, curve_rows, phase_ret, phase_cnt = init(keys, traced), 0, [], [], []

    bar = tqdm(total=config.num_evals, initial=start, disable=not progress, unit="chunk",
               desc=label or f"{config.env}/{config.method} x{len(cells)}")
    stop = config.num_evals if max_chunks is None else min(config.num_evals, start + max_chunks)
    for chunk in range(start, stop):
        t0 = time.perf_counter()
        state, metrics = run_chunk(state, traced)
        metrics = jax.device_get(metrics)
        seconds = time.perf_counter() - t0
        summary = chunk_summary(metrics)
        phase_ret.append(np.asarray(metrics.phases.episode_return_sum)[: len(cells)])
        phase_cnt.append(np.asarray(metrics.phases.episode_count)[: len(cells)])
        for i, cell in enumerate(cells):
            row = {"env": config.env, "method": config.method, **tags, **dataclasses.asdict(cell), "chunk": chunk}
            row.update({k: np.asarray(v)[i].item() for k, v in summary.items()})
            row["seconds"] = seconds
            row["grid_steps_per_second"] = config.env_steps_per_chunk * len(padded) / seconds
            curve_rows.append(row)
        atomic_write_text(curves_path, rows_to_csv(curve_rows))
        if checkpoint:
            _save_npz(phase_path, returns=np.stack(phase_ret), counts=np.stack(phase_cnt))
            ckpt.save_checkpoint(ckpt_dir, state, chunk + 1)
        bar.update(1)
        evals = summary["eval_return"][: len(cells)]
        bar.set_postfix(eval=f"{np.nanmean(evals):.0f}",
                        sps=f"{config.env_steps_per_chunk * len(padded) / seconds:.0f}")
    bar.close()
    if stop < config.num_evals:
        return None

    returns = np.concatenate(phase_ret, axis=-1) if phase_ret else np.zeros((len(cells), 0))
    counts = np.concatenate(phase_cnt, axis=-1) if phase_cnt else np.zeros((len(cells), 0))
    score_rows = []
    for i, cell in enumerate(cells):
        rows = [r for r in curve_rows if all(r[f] == getattr(cell, f) for f in CELL_FIELDS)]
        rows = rows[: config.num_evals] if len(rows) >= config.num_evals else rows
        row = {"env": config.env, "method": config.method, **tags, **dataclasses.asdict(cell)}
        row.update(cell_scores(rows, returns[i], counts[i], evaluated=config.eval_episodes > 0))
        diag_names = [k for k in rows[0] if k not in row and k not in ("chunk", "env_steps", "eval_return",
                                                                       "train_return", "seconds",
                                                                       "grid_steps_per_second")]
        for k in diag_names:
            vals = np.array([r[k] for r in rows], float)
            row[f"mean_{k}"] = float(np.nanmean(vals)) if np.any(np.isfinite(vals)) else float("nan")
        score_rows.append(row)
    atomic_write_text(scores_path, rows_to_csv(score_rows))
    if checkpoint:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    return score_rows


def _save_npz(path: str, **arrays) -> None:
    tmp = f"{path}.tmp.{os.getpid()}.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- run metadata

def package_versions() -> dict:
    from importlib import metadata

    names = ["jax", "jaxlib", "flax", "optax", "brax", "mujoco", "mujoco-mjx", "chex", "orbax-checkpoint",
             "numpy", "scipy", "matplotlib", "tyro"]
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def git_commit() -> str | None:
    import subprocess

    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def write_run_metadata(run_dir: str, args: dict, base_config: Config) -> None:
    """The resolved configuration, package versions, git commit, devices; refuses a changed sweep."""
    os.makedirs(run_dir, exist_ok=True)
    meta_path = os.path.join(run_dir, "run.json")
    resolved = {"args": args, "base_config": dataclasses.asdict(base_config)}
    if os.path.exists(meta_path):
        old = json.load(open(meta_path))
        if json.dumps(old.get("resolved"), sort_keys=True, default=str) != json.dumps(
                json.loads(json.dumps(resolved, default=str)), sort_keys=True, default=str):
            raise ValueError(f"{run_dir} was started with different settings (run.json); "
                             "resume with the same command or choose another --out")
        return
    meta = {"resolved": json.loads(json.dumps(resolved, default=str)), "versions": package_versions(),
            "git_commit": git_commit(), "devices": [str(d) for d in jax.devices()],
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    atomic_write_text(meta_path, json.dumps(meta, indent=1, default=str))


def random_scores(run_dir: str, tasks: Sequence[str], base_config: Config, episodes: int = 16) -> dict:
    """Uniform-random policy return per task (SPEC §7 normalisation), cached in the run directory."""
    path = os.path.join(run_dir, "random_scores.json")
    cache = json.load(open(path)) if os.path.exists(path) else {}
    for task in tasks:
        if task in cache:
            continue
        trainer = make_train(base_config.replace(env=task))
        cache[task] = float(jax.jit(lambda k: trainer.random_score(k, episodes))(jax.random.PRNGKey(12345)))
        atomic_write_text(path, json.dumps(cache, indent=1))
    return {t: cache[t] for t in tasks}


def _load_all(run_dir: str, filename: str) -> list[dict]:
    rows = []
    for root, _, files in sorted(os.walk(run_dir)):
        if filename in files:
            rows.extend(read_csv(os.path.join(root, filename)))
    return rows


def load_scores(run_dir: str) -> list[dict]:
    """Every group's score rows under ``run_dir`` (finished groups only)."""
    return _load_all(run_dir, "scores.csv")


def load_curves(run_dir: str) -> list[dict]:
    """Every group's learning-curve rows under ``run_dir`` (finished or not)."""
    return _load_all(run_dir, "curves.csv")
