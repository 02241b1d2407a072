"""What every study script does once its groups are planned (``run_study``): plain runs, shards and
their merge, re-running one cell against the sweep, and the random-policy reference scores."""

from __future__ import annotations

from __future__ import annotations
import dataclasses
import math
import os
import shutil
from typing import Sequence
import jax
from vaco_jax.core.config import Config
from vaco_jax.analysis import results
from vaco_jax.core.knobs import ConfigError
from vaco_jax.core.train import make_train
from vaco_jax.driver.devices import barrier
from vaco_jax.driver.grid import Cell, Group, _fmt, check_cells, check_max_cells, parse_shard, plan_digest, plan_text, select_cell, shard_groups
from vaco_jax.driver.memory import memory_plan
from vaco_jax.driver.provenance import check_identity, run_lock, shard_records, write_run_metadata
from vaco_jax.driver.runner import check_group_settings, check_max_chunks, group_finished, run_group, run_groups
from vaco_jax.driver.tracking import check_tracking, options_from_args, tracking_kwargs


def random_scores(run_dir: str, tasks: Sequence[str], base_config: Config, episodes: int = 16) -> dict:
    """Uniform-random policy return per task (docs/evaluation.md normalisation), cached in the run directory.

    Shards running at once may each compute it: every write is atomic under a name of its own
    (results.atomic_write_bytes), so a reader sees one complete file, and each writer writes every
    task it was asked for, so the file a shard leaves holds all of the study's tasks."""
    path = os.path.join(run_dir, "random_scores.json")
    cache = results.read_json(path) if os.path.exists(path) else {}
    for task in tasks:
        if task in cache:
            continue
        trainer = make_train(base_config.replace(env=task))
        cache[task] = float(jax.jit(lambda k: trainer.random_score(k, episodes))(jax.random.PRNGKey(12345)))
        results.write_json(path, cache)
    return {t: cache[t] for t in tasks}



def _check_shards(run_dir: str, groups: Sequence[Group], count: int | None) -> dict:
    """Read-only: every shard record in ``run_dir`` belongs to one split into the same N of the same
    planned cells as ``groups``; returns {index: record}."""
    found = {}
    for path in shard_records(run_dir):
        meta = results.read_json(path)
        info = meta.get("shard", {})
        if count is not None and info.get("count") != count:
            raise ConfigError(f"shard: {run_dir} holds shards of a {info.get('count')}-way split ({path}); "
                              f"allowed values here: I/{info.get('count')} with 0 <= I < {info.get('count')}, "
                              "or another --out")
        count = info.get("count")
        if info.get("plan") != plan_digest(groups):
            raise ConfigError(f"shard: {path} was planned with other cells (seeds, lag depths, --sweep values, "
                              "methods or tasks) than this command; give the shards' settings or another --out")
        found[info.get("index")] = meta
    return found


def _merge_text(run_dir: str, count: int) -> str:
    return (f"when all {count} shards have finished, merge them: run the same command without --shard (it runs "
            f"nothing, checks that every shard finished, and writes the summaries and figures into {run_dir}), "
            f"or: python experiments/plot.py {run_dir}")


def _relative_difference(a, b) -> float:
    if isinstance(a, str) or isinstance(b, str):  # a text column (``nonfinite``): empty reads back as NaN
        text = ["" if isinstance(v, float) and math.isnan(v) else str(v) for v in (a, b)]
        return 0.0 if text[0] == text[1] else float("inf")
    a, b = float(a), float(b)
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return float("inf")
    return abs(a - b) / max(abs(a), abs(b))


def compare_rows(rerun: dict, sweep_row: dict) -> tuple[list[tuple[str, object, object, float]], float]:
    """The score columns of two rows of one cell, each with its relative difference, and the largest."""
    columns = [k for k in rerun if k in sweep_row and not results.identifies_cell(k)]
    out = []
    for k in columns:
        a, b = sweep_row[k], rerun[k]
        out.append((k, a, b, 0.0 if a == b else _relative_difference(a, b)))
    return out, max((d for *_, d in out), default=0.0)


def sweep_row(run_dir: str, group: Group, cell: Cell) -> dict | None:
    """The row of ``cell`` in the sweep's finished ``scores.csv`` (whole, extended, or in shards); None if
    that part of the sweep has not finished."""
    key = results.cell_key({"env": group.config.env, "method": group.config.method, **dict(group.tags),
                            **cell.row()})
    for g in results.group_dirs(os.path.join(run_dir, group.subdir)):
        path = os.path.join(g, "scores.csv")
        if os.path.exists(path):
            for row in results.read_table(path, expect_rows=len(results.read_cells(g))):
                if results.cell_key(row) == key:
                    return row
    return None


def rerun_cell(run_dir: str, groups: Sequence[Group], which, info: dict, progress: bool = True,
               max_chunks: int | None = None) -> dict | None:
    """Re-run one planned cell alone into ``RUN/rerun/GROUP/cell-K/`` (a finished re-run there is
    run again; nothing of the sweep is written), then print its score row next to the sweep's and
    the largest relative difference. Returns ``{"rerun", "sweep", "max_rel_diff", "dir"}`` (None
    when stopped by ``max_chunks``)."""
    group, j, k = select_cell(groups, which)
    cell = group.cells[j]
    check_identity(run_dir, groups)
    if shard_records(run_dir):  # a sweep split into shards: this plan must be the shards' plan
        _check_shards(run_dir, groups, None)
    where = os.path.join(run_dir, results.RERUN, group.subdir, f"cell-{k}")
    print(f"re-running cell {k} = {group.subdir}:{j} ({' '.join(f'{n}={_fmt(v)}' for n, v in cell.row().items())}) "
          f"alone -> {where}")
    one = dataclasses.replace(group, cells=(cell,))
    with run_lock([where]):  # the same cell re-run twice at once: the second stops here
        if os.path.exists(os.path.join(where, "scores.csv")):  # a finished re-run is run again
            for name in os.listdir(where):
                entry = os.path.join(where, name)
                if os.path.isdir(entry):
                    shutil.rmtree(entry)
                else:
                    os.remove(entry)
        write_run_metadata(where, [one], info)
        rows = run_group(group.config, [cell], where, progress=progress, label=f"cell {k} ({group.subdir}:{j})",
                         tags=dict(group.tags), max_chunks=max_chunks)
    if rows is None:
        print(f"stopped after --max-chunks {max_chunks}; rerun the same command to continue")
        return None
    again = rows[0]
    old = sweep_row(run_dir, group, cell)
    if old is None:
        print(f"the sweep in {run_dir} has no finished row for this cell (its group or shard has not finished); "
              "the re-run's row:")
        for name, v in again.items():
            print(f"  {name:<32} {v}")
        return {"rerun": again, "sweep": None, "max_rel_diff": None, "dir": where}
    table, worst = compare_rows(again, old)
    print(f"  {'column':<30} {'sweep':>22} {'re-run':>22} {'rel. diff':>10}")
    for name, a, b, d in table:
        print(f"  {name:<30} {str(a):>22} {str(b):>22} {d:>10.2e}")
    worst_name = max(table, key=lambda t: t[3])[0] if table else "-"
    print(f"largest relative difference: {worst:.3e}" + (" (bit-identical)" if worst == 0 else f" ({worst_name})"))
    return {"rerun": again, "sweep": old, "max_rel_diff": worst, "dir": where}


def run_study(run_dir: str, groups: Sequence[Group], args, spec: dict, prepare=None) -> bool:
    """What every study script does once its groups are planned and validated. Returns True when
    the whole study has finished and the script should write its summaries and figures.

    - plain: the plan, ``run.json`` (:func:`write_run_metadata`), ``prepare()`` (e.g. the random
      scores), every group;
    - ``args.shard = "I/N"``: only that shard's cells (into ``GROUP/shard-I-of-N/``, its record in
      ``run.shard-I-of-N.json``), then prints how to merge (a shard writes no summary or figure);
    - plain in a directory holding shards: the merge; runs nothing, checks that every shard of the
      split finished (else lists the unfinished ones and returns False);
    - ``args.cell = "K"`` or ``"GROUP:J"``: :func:`rerun_cell`;
    - ``args.distributed`` in a ``jax.distributed`` run of N processes: process I runs shard I/N on its
      own devices, all wait at a barrier, then process 0 merges (the only one to return True).
    A memory estimate per cell is printed (and checked against the devices' memory) before anything
    compiles; ``args.max_cells_per_program`` splits larger groups into parts.
    Every flag is checked before anything is written.
    """
    shard, cell = getattr(args, "shard", None), getattr(args, "cell", None)
    if shard is not None and cell is not None:
        raise ConfigError(f"shard={shard!r}, cell={cell!r}: give --shard or --cell, not both")
    check_max_chunks(args.max_chunks)
    for g in groups:  # a study's scores read evaluation episodes
        if g.config.eval_episodes < 1:
            raise ConfigError(f"eval_episodes={g.config.eval_episodes} ({g.subdir}): a study's scores (final and AUC "
                              "evaluation return) need evaluation episodes; allowed values: an integer >= 1")
    max_cells = getattr(args, "max_cells_per_program", None)
    check_max_cells(max_cells)
    # --wandb, --capture-video: what they need, checked before anything is written
    check_tracking([g.config for g in groups], [len(g.cells) for g in groups], *options_from_args(args))
    from vaco_jax.driver.config_file import check_rerun

    check_rerun(args, groups)  # a group's own config.json: this plan is that group
    preflight(run_dir, groups)
    if getattr(args, "dry_run", False):  # the plan, memory and time estimates; nothing compiled or written
        dry_run(run_dir, groups, shard, cell, max_cells)
        return False
    info = {**dataclasses.asdict(args), **spec}
    if cell is not None:
        print(plan_text(groups))
        rerun_cell(run_dir, groups, cell, info, progress=args.progress, max_chunks=args.max_chunks)
        return False
    if getattr(args, "distributed", False):
        if shard is not None:
            raise ConfigError(f"shard={shard!r}, distributed=True: with --distributed each process runs its own "
                              "shard; give one of them")
        index, count = jax.process_index(), jax.process_count()
        if count > 1:
            print(f"process {index} of {count} (jax.distributed): shard {index}/{count} on this host's "
                  f"{len(jax.local_devices())} device(s)")
            _run_shard(run_dir, groups, index, count, info, args, prepare, max_cells, distributed=True)
            barrier("vaco_jax.study.shards_done")
            if index != 0:  # one process writes the summaries
                return False
            return merge_shards(run_dir, groups, info, None)
    if shard is not None:
        index, count = parse_shard(shard)
        _run_shard(run_dir, groups, index, count, info, args, prepare, max_cells)
        return False
    if shard_records(run_dir):
        return merge_shards(run_dir, groups, info, prepare)
    print(plan_text(groups))
    memory_plan(groups, max_cells)
    with run_lock([os.path.join(run_dir, g.subdir) for g in groups]):  # the same groups run twice at once: stop
        write_run_metadata(run_dir, groups, info)
        if prepare is not None:
            prepare()
        return run_groups(run_dir, groups, progress=args.progress, max_chunks=args.max_chunks,
                          tensorboard=getattr(args, "tensorboard", False), max_cells_per_program=max_cells,
                          **tracking_kwargs(args))


def dry_run(run_dir: str, groups: Sequence[Group], shard: str | None = None, cell: str | None = None,
            max_cells: int | None = None) -> None:
    """``--dry-run`` (driver/dryrun.py): what ``run_study`` would run with these flags, printed; nothing
    compiled or written. With ``--shard I/N`` the shard's cells (numbered as in the whole plan), with
    ``--cell`` the one cell re-run alone."""
    from vaco_jax.driver import dryrun

    if cell is not None:
        group, j, k = select_cell(groups, cell)
        one = dataclasses.replace(group, cells=(group.cells[j],))
        where = os.path.join(run_dir, results.RERUN, group.subdir, f"cell-{k}")
        dryrun.report(where, [one], plan=plan_text(groups) + f"\n--cell {cell}: cell {k} ({group.subdir}:{j}) "
                                                             f"re-run alone into {where}, then compared")
        return
    if shard is not None:
        index, count = parse_shard(shard)
        part = shard_groups(groups, index, count)
        first = index * sum(len(g.cells) for g in groups) // count
        text = "\n".join(plan_text(part, first).splitlines()[1:])
        dryrun.report(run_dir, part, max_cells, plan=f"{plan_text(groups)}\nshard {index}/{count}: "
                      f"{sum(len(g.cells) for g in part)} cell(s) in {len(part)} group(s)\n{text}")
        return
    if shard_records(run_dir):
        print(f"{run_dir} holds shards: a run without --shard merges them and runs nothing")
    dryrun.report(run_dir, groups, max_cells)


def preflight(run_dir: str, groups: Sequence[Group]) -> None:
    """Read-only, before a command writes anything: every group's cells are valid and distinct, a group
    that recorded its settings was run with these, and the run's records agree. A refused command thus
    leaves ``run.json`` and every other file as they were (a refusal after writing would have rewritten
    the run's identity with the refused settings)."""
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ConfigError(f"out={run_dir!r} is a file; give a directory")
    for g in groups:
        check_cells(g.cells, g.subdir)
        check_group_settings(os.path.join(run_dir, g.subdir), g.config)
    if os.path.isdir(run_dir):
        check_identity(run_dir, groups)


def _run_shard(run_dir, groups, index, count, info, args, prepare, max_cells, distributed: bool = False) -> bool:
    """Run shard ``index`` of ``count``: its cells into ``GROUP/shard-I-of-N/``, its record in
    ``run.shard-I-of-N.json``; prints how to merge. Returns whether it finished."""
    shard = f"{index}/{count}"
    part = shard_groups(groups, index, count)
    whole = [g.subdir for g in groups if os.path.exists(os.path.join(run_dir, g.subdir, "cells.json"))]
    if whole:
        raise ConfigError(f"shard={shard!r}: {run_dir} already holds {whole[0]} run whole (without --shard); "
                          "a shard would run its cells a second time; allowed: another --out")
    _check_shards(run_dir, groups, count)
    print(plan_text(groups))
    print(f"shard {index}/{count}: {sum(len(g.cells) for g in part)} cell(s) in {len(part)} group(s)")
    first = index * sum(len(g.cells) for g in groups) // count
    print("\n".join(plan_text(part, first).splitlines()[1:]))
    memory_plan(part, max_cells)
    with run_lock([os.path.join(run_dir, g.subdir) for g in part]):  # the same shard run twice at once: stop
        write_run_metadata(run_dir, groups, info, shard=(index, count),
                           extra={"shard": {"index": index, "count": count, "plan": plan_digest(groups),
                                            "groups": [g.subdir for g in part]}})
        if prepare is not None:
            prepare()
        finished = run_groups(run_dir, part, progress=args.progress, max_chunks=args.max_chunks,
                              tensorboard=getattr(args, "tensorboard", False), max_cells_per_program=max_cells,
                              **tracking_kwargs(args))
    if finished:
        print(f"shard {index}/{count} finished -> {run_dir}; " + (
            "waiting for the other processes; process 0 then merges" if distributed else _merge_text(run_dir, count)))
    return finished


def merge_shards(run_dir: str, groups: Sequence[Group], info: dict, prepare=None) -> bool:
    """The study run without ``--shard`` in a directory its shards wrote: check every shard of the
    split is there and finished (nothing is run); True when the summaries can be written."""
    print(plan_text(groups))
    found = _check_shards(run_dir, groups, None)
    count = next(iter(found.values()))["shard"]["count"]
    write_run_metadata(run_dir, groups, info)
    missing = []
    for index in range(count):
        for g in shard_groups(groups, index, count):
            if not group_finished(os.path.join(run_dir, g.subdir)):
                missing.append(f"shard {index}/{count} ({g.subdir}: " +
                               ("not started" if index not in found else "not finished") + ")")
    if missing:
        print(f"{run_dir} holds a sweep split into {count} shards; not finished yet:", *missing, sep="\n  ")
        print("run each of them (--shard I/N), then this command again")
        return False
    print(f"merging the {count} shards of {run_dir}")
    if prepare is not None:
        prepare()
    return True
