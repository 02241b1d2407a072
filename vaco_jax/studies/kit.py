"""The study kit: what every protocol study shares, so that a study is a declaration of its units and rules.

A **protocol** is a JSON file fixed before a study's first run; its sha256 is recorded in every run
directory and in every line of the study's ``manifest.csv``. A changed protocol is refused
(:func:`check_protocol_unchanged`) until the change is recorded, dated, in ``deviations.csv``
(:func:`record_deviation`, written only once every other check of the call has passed); a report is
computed only under the protocol its units ran under (:func:`check_report_protocol`).

A **unit** (:class:`Unit`) is one compiled group with an estimated cost in minutes. ``run --minutes M``
(:func:`run_units`, the loop every study's ``run`` is) takes the next unfinished units whose estimates
fit (:func:`select`), runs each (:func:`run_unit`) and leaves it committed-ready (:func:`collect`: its
small tables copied under the results directory, then its manifest line, with the CPU model that ran it). Before the first unit, :func:`start_run` does every
read-only check, then copies back tables lost from the results directory while the run directories still
hold them. ``plan`` and ``report`` agree on what is finished: every unit the manifest lists must hold its
tables (:func:`check_units_present` names any missing or damaged one).

A study module supplies its protocol check, its units (in order), ``unit_dir(name)`` (a unit's folder
from its name alone), the hooks where its loop differs and its report; the rest is here
(``docs/studies.md``; ``experiments/own_study.py`` is a whole study on it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Literal

from tyro.conf import Positional

from vaco_jax.core.config import ConfigError

# a finished unit's small tables, copied from its run directory to the committed results
COPIED = ("scores.csv", "curves.csv", "cells.json", "config.json")


@dataclasses.dataclass(frozen=True)
class Unit:
    name: str
    stage: str  # tuning | study
    group: object  # grid.Group
    runs: int
    minutes: float


@dataclasses.dataclass
class RunArgs:
    """The flags every study's ``plan`` / ``run`` / ``report`` takes; a study adds where its files go
    (``protocol``, ``results``, ``runs``: fields or properties) and its own flags."""

    stage: Positional[Literal["plan", "run", "report"]]  # plan: units, costs, status; run: run units; report: the rules
    minutes: float | None = None  # run: the next unfinished units whose summed estimated cost fits in this
    units: tuple[str, ...] = ()  # run: these units (names as `plan` prints them) instead of --minutes
    deviation: str = ""  # run: record a change of the protocol since earlier units ran (text, dated)
    dry_run: bool = False  # run: print the units it would start with (plan, memory, time); nothing compiled or written
    progress: bool = True  # a progress bar per group (--no-progress for logs)
    max_chunks: int | None = None  # stop every group after this many chunks; rerun to continue


JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
              type(None): "null"}


def load_protocol(path: str) -> tuple[dict, str]:
    """The protocol's sections and the sha256 of its bytes; a file that cannot be read, is not JSON or
    is not one JSON object of sections is a one-line error naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"protocol: {path} cannot be read ({e.strerror or e})") from None
    try:
        p = json.loads(data)
    except ValueError as e:  # json.JSONDecodeError, or bytes that are not text
        raise ConfigError(f"protocol {path}: not valid JSON ({e})") from None
    if not isinstance(p, dict):
        raise ConfigError(f"protocol {path}: must be a JSON object of sections, not {JSON_KINDS.get(type(p), 'that')}")
    return p, hashlib.sha256(data).hexdigest()


def write_protocol(path: str, p: dict) -> str:
    """Fix a new study's protocol: ``p`` as JSON in ``path``, which must not exist yet (a fixed protocol
    changes only by editing the file and recording a deviation). Returns the sha256 of the bytes written."""
    if os.path.exists(path):
        raise ConfigError(f"protocol: {path} already exists; it is fixed (edit it and record --deviation)")
    data = (json.dumps(p, indent=2) + "\n").encode()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "xb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def check_protocol_file(check, p: dict, path: str) -> None:
    """``check(p)``, its errors prefixed with the file; a field the check reads and the file lacks, or
    one of the wrong kind, is a one-line error too (never a traceback)."""
    try:
        check(p)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except KeyError as e:
        raise ConfigError(f"{path}: protocol field {e.args[0]!r} missing") from None
    except (TypeError, AttributeError, IndexError) as e:
        raise ConfigError(f"{path}: a protocol field has the wrong kind of value ({e})") from None


def manifest(results_dir: str) -> list[dict]:
    """``manifest.csv``'s lines: one per finished unit (its protocol hash, time, cost and CPU model)."""
    from vaco_jax.analysis import results
    path = os.path.join(results_dir, "manifest.csv")
    return results.read_table(path) if os.path.exists(path) else []


def protocol_changed(results_dir: str, digest: str) -> list[str]:
    """The protocol hashes earlier units ran under, other than ``digest``, when ``digest`` is not a
    recorded deviation (``deviations.csv``); [] when units may run, or a report be computed, under it."""
    from vaco_jax.analysis import results
    seen = {r["protocol_sha256"] for r in manifest(results_dir)}
    dev_path = os.path.join(results_dir, "deviations.csv")
    recorded = {r["protocol_sha256"] for r in results.read_table(dev_path)} if os.path.exists(dev_path) else set()
    if not seen or seen <= {digest} or digest in recorded:
        return []
    return sorted(seen - {digest})


def check_protocol_unchanged(results_dir: str, digest: str, deviation: str, protocol: str = "protocol.json") -> list[str]:
    """Read-only: units run under another protocol hash need a deviation (``--deviation``) before more
    units run. Returns the earlier hashes the deviation is to be recorded against ([] when none is needed);
    :func:`record_deviation` writes it once everything else is checked."""
    previous = protocol_changed(results_dir, digest)
    if previous and not deviation:
        raise ConfigError(f"protocol: {protocol} changed since earlier units ran (their sha256 "
                          f"{', '.join(previous)}, now {digest}); record why with --deviation \"...\"")
    return previous


def record_deviation(results_dir: str, digest: str, previous: list[str], deviation: str) -> None:
    """Append a deviation, dated, to ``deviations.csv`` (nothing when ``previous`` is empty)."""
    from vaco_jax.analysis import results
    if not previous:
        return
    dev_path = os.path.join(results_dir, "deviations.csv")
    rows = results.read_table(dev_path) if os.path.exists(dev_path) else []
    rows.append({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "protocol_sha256": digest,
                 "previous": " ".join(previous), "deviation": deviation})
    os.makedirs(results_dir, exist_ok=True)
    results.write_table(dev_path, rows)


def check_report_protocol(results_dir: str, digest: str, protocol: str) -> None:
    """A report is computed only under the protocol its units ran under (or a recorded deviation of it)."""
    previous = protocol_changed(results_dir, digest)
    if previous:
        raise ConfigError(f"protocol: {protocol} (sha256 {digest}) is not the protocol the units ran under "
                          f"({', '.join(previous)}) nor a recorded deviation; report computes only under it: "
                          "restore the file, or record the change with run --deviation \"...\"")


def unit_problems(results_dir: str, unit_dir) -> dict[str, str]:
    """{unit the manifest lists as finished: what is wrong with its copied tables}, for each whose
    tables (``COPIED``) are missing or fail their checksum; ``unit_dir(name)``: the unit's folder under
    ``results_dir``."""
    from vaco_jax.analysis import results
    out = {}
    for r in manifest(results_dir):
        folder = os.path.join(results_dir, unit_dir(r["unit"]))
        for name in COPIED:
            try:
                (results.read_json if name.endswith(".json") else results.read_table)(os.path.join(folder, name))
            except results.ResultsError as e:
                out[r["unit"]] = str(e)
                break
    return out


def recoverable(runs: str, unit_dir, names) -> list[str]:
    """The units of ``names`` whose finished group in the run directories ``runs`` holds every table
    ``COPIED``, each verified (``run`` copies them back)."""
    from vaco_jax.analysis import results
    from vaco_jax.driver import runner
    out = []
    for n in names:
        src = os.path.join(runs, unit_dir(n))
        try:
            if runner.group_finished(src):
                for name in COPIED:
                    (results.read_json if name.endswith(".json") else results.read_table)(os.path.join(src, name))
                out.append(n)
        except results.ResultsError:
            pass
    return out


def check_units_present(results_dir: str, runs: str, unit_dir, copy_back: bool = False) -> list[str]:
    """Read-only: every unit the manifest lists as finished holds its tables under ``results_dir``; a
    table missing or damaged is a one-line error naming the units (a report never computes a family from
    fewer units, a plan never counts them done). With ``copy_back`` (``run``) a unit whose finished group
    is still in ``runs`` is no error: its name is returned, for :func:`copy_back_units` once every check
    has passed."""
    from vaco_jax.analysis import results
    problems = unit_problems(results_dir, unit_dir)
    back = recoverable(runs, unit_dir, problems) if problems else []
    lost = {n: why for n, why in problems.items() if not (copy_back and n in back)}
    if lost:
        held = [n for n in back if n in lost]
        raise results.ResultsError(
            f"{os.path.join(results_dir, 'manifest.csv')} lists as finished {len(lost)} unit(s) whose tables are "
            "missing or damaged: " + "; ".join(f"{n} ({why})" for n, why in lost.items())
            + f"; restore them (git checkout -- {results_dir})"
            + (f", or copy back what {runs} still holds ({', '.join(held)}) with `run`" if held else ""))
    return back if copy_back else []


def copy_back_units(results_dir: str, runs: str, unit_dir, names: list[str]) -> None:
    """Copy the tables of listed units (:func:`check_units_present`'s names) back from ``runs``."""
    for n in names:
        copy_tables(os.path.join(runs, unit_dir(n)), os.path.join(results_dir, unit_dir(n)))
        print(f"unit {n}: its tables were missing or damaged under {results_dir}; copied back from {runs}", flush=True)


def as_runs_flag(e: ConfigError) -> ConfigError:
    """A run-directory refusal as this driver's flags say it: its run directories are ``--runs``."""
    import re
    return ConfigError(re.sub(r"^out=", "runs=", re.sub(r"--out\b", "--runs", str(e))))


def preflight_units(units: list, runs: str) -> None:
    """Read-only, before ``run`` writes anything: the units' groups against their run directories (cells,
    recorded settings, the run's identity), as the group runner checks them."""
    from vaco_jax.driver import study
    by_stage: dict[str, list] = {}
    for u in units:
        by_stage.setdefault(u.stage, []).append(u.group)
    for stage, groups in by_stage.items():
        try:
            study.preflight(os.path.join(runs, stage), groups)
        except ConfigError as e:
            raise as_runs_flag(e) from None


def run_unit(u, run_dir: str, args, spec: dict) -> bool:
    """``study.run_study`` on one unit's group (its refusals naming ``--runs``)."""
    from vaco_jax.driver import study
    try:
        return study.run_study(run_dir, [u.group], args, spec,
                               prepare=lambda: study.random_scores(run_dir, [u.group.config.env], u.group.config))
    except ConfigError as e:
        raise as_runs_flag(e) from None


def start_run(units: list, args, digest: str, unit_dir) -> None:
    """What ``run`` does before its first unit. Read-only checks first: the protocol against the
    manifest's hashes (a change needs ``--deviation``), every listed unit's tables (present, or still in
    the run directories), the first round's groups against their run directories. Only then the
    deviation is recorded, lost tables are copied back, and units finished in the run directories but
    never listed (stopped before their tables were copied) are collected."""
    previous = check_protocol_unchanged(args.results, digest, args.deviation, args.protocol)
    back = check_units_present(args.results, args.runs, unit_dir, copy_back=True)
    preflight_units(select(units, args, None if args.units else args.minutes, first=True), args.runs)
    record_deviation(args.results, digest, previous, args.deviation)
    copy_back_units(args.results, args.runs, unit_dir, back)
    from vaco_jax.driver import runner
    listed = {r["unit"] for r in manifest(args.results)}
    for u in units:  # finished in a run directory but stopped before its tables were copied
        if u.name not in listed and runner.group_finished(os.path.join(args.runs, u.stage, u.group.subdir)):
            collect(u, os.path.join(args.runs, u.stage), args.results, digest, 0.0, here=False)
            print(f"unit {u.name}: finished under {args.runs}, copied under {args.results}", flush=True)


def run_units(plan, args, digest: str, unit_dir, spec, *, units: list | None = None, ready=None, after_unit=None,
              after_round=None, paced=None, waiting: str = "nothing to run", show_pace: bool = False,
              all_done: str = "every unit has finished") -> list[str]:
    """``run``: :func:`start_run`, then the minutes-bounded loop; returns the names of the units it finished.

    Each round takes the next units that fit in what is left of ``args.minutes`` of wall time
    (:func:`select`; every named unit with ``args.units``), their estimates scaled by the pace measured
    so far (this call's minutes over the estimates of the units it finished), runs each into
    ``args.runs/<stage>`` with the record ``spec(unit)`` and leaves it committed-ready (:func:`collect`),
    then plans again (``plan()``: a finished unit can open new ones). It stops when nothing fits, after
    one round with ``args.units`` or ``args.max_chunks`` (the groups stop part-way), or when a hook says so.

    ``plan()``: the study's units in order (``units``: the list already planned, when the caller has it).
    Hooks, for what differs between studies: ``ready(chosen)`` before a round starts (raises to refuse
    it); ``after_unit(unit)`` after each unit, finished or not (True ends the round: the plan depends on
    it); ``after_round(chosen, done)`` after each round's new plan; ``paced(unit)`` whether a finished
    unit's time counts in the pace (default: every one). ``waiting``: the line printed when the first
    round finds unfinished units it cannot start; ``show_pace``: a round's estimate says its pace;
    ``all_done``: the line printed when every unit planned has finished (a study whose next units follow
    a report says so there).
    """
    start_run(plan() if units is None else units, args, digest, unit_dir)
    units = plan()  # with the tables copied back
    start, done, measured, estimated = time.perf_counter(), [], 0.0, 0.0
    while True:
        left = None if args.units else args.minutes - (time.perf_counter() - start) / 60.0
        pace = measured / estimated if estimated else 1.0  # the protocol's rates against this machine's now
        chosen = [u for u in select(units, args, left, first=not done, pace=pace) if u.name not in done]
        if not chosen:
            if not done:
                print(all_done if all(finished(args, u) for u in units) else waiting)
            break
        if ready is not None:
            ready(chosen)
        print(f"protocol sha256 {digest}; next: " + ", ".join(u.name for u in chosen)
              + f" (~{sum(u.minutes for u in chosen) * pace:.0f} min estimated"
              + (f": the plan's estimate x {pace:.2f}, the pace of this call's units so far)" if show_pace and done
                 else ")"), flush=True)
        for u in chosen:
            run_dir = os.path.join(args.runs, u.stage)
            t0 = time.perf_counter()
            if run_unit(u, run_dir, args, spec(u)):
                collect(u, run_dir, args.results, digest, time.perf_counter() - t0)
                done.append(u.name)
                if paced is None or paced(u):
                    measured, estimated = measured + (time.perf_counter() - t0) / 60.0, estimated + u.minutes
                print(f"unit {u.name} finished in {time.perf_counter() - t0:.0f} s", flush=True)
            if after_unit is not None and after_unit(u):
                break
        units = plan()
        if after_round is not None:
            after_round(chosen, done)
        if args.units or args.max_chunks is not None:
            break
    return done


def copy_tables(src: str, dst: str) -> None:
    """A finished group's tables (``COPIED``) from its run directory to its place under the results."""
    from vaco_jax.analysis import results
    os.makedirs(dst, exist_ok=True)
    for name in COPIED:
        results.atomic_copy(os.path.join(src, name), os.path.join(dst, name))


def unit_cpu(run_dir: str, here: bool) -> str:
    """The CPU model that ran a unit, from its run directory's ``run.json`` (which records every machine
    that ran part of that directory): this machine's when it has just finished the unit (it is among
    them); else the one model the record names, or every model it names joined by " | " (one of them ran
    it); "" without a record."""
    from vaco_jax.analysis import results
    path = os.path.join(run_dir, "run.json")
    models = list(dict.fromkeys(str(m.get("cpu")) for m in results.read_json(path).get("machines", [])
                                if m.get("cpu"))) if os.path.exists(path) else []
    if here:
        from vaco_jax.driver import provenance
        cpu = provenance.machine()["cpu"]
        if cpu in models or not models:
            return cpu or ""
    return " | ".join(models)


def merge_provenance(run_dir: str, dst: str) -> None:
    """Fold a run directory's ``random_scores.json`` and ``run.json`` into the committed ones at ``dst``.

    Units of one stage run over several sessions, each on a fresh machine whose run directory holds
    only that session's units, so the committed files are merged into, never replaced: a task's
    uniform-random return already committed is kept (every later unit of the task is normalised by
    it); ``run.json`` takes this run's provenance (versions, commit, machine, command), every group's
    identity committed so far plus this run's, and every machine that ran a unit."""
    from vaco_jax.analysis import results

    def committed(name: str) -> dict:
        path = os.path.join(dst, name)
        return results.read_json(path) if os.path.exists(path) else {}

    os.makedirs(dst, exist_ok=True)
    src = os.path.join(run_dir, "random_scores.json")
    if os.path.exists(src):
        merged = committed("random_scores.json")
        for task, value in results.read_json(src).items():
            merged.setdefault(task, value)
        results.write_json(os.path.join(dst, "random_scores.json"), merged)
    src = os.path.join(run_dir, "run.json")
    if os.path.exists(src):
        new, old = results.read_json(src), committed("run.json")
        machines = [m for m in old.get("machines", []) if m not in new.get("machines", [])] + new.get("machines", [])
        results.write_json(os.path.join(dst, "run.json"), {**new, "identity": {**old.get("identity", {}),
                                                                               **new.get("identity", {})},
                                                           "machines": machines})


def collect(unit: Unit, run_dir: str, results_dir: str, digest: str, seconds: float, here: bool = True) -> None:
    """Copy a finished unit's small tables under ``results_dir`` and add its manifest line (with the CPU
    model that ran it, :func:`unit_cpu`; ``here``: this process has just finished it). The line is
    written last: a unit is listed only once every table is in."""
    from vaco_jax.analysis import results
    copy_tables(os.path.join(run_dir, unit.group.subdir), os.path.join(results_dir, unit.stage, unit.group.subdir))
    merge_provenance(run_dir, os.path.join(results_dir, unit.stage))
    rows = [r for r in manifest(results_dir) if r["unit"] != unit.name]
    rows.append({"unit": unit.name, "runs": unit.runs, "protocol_sha256": digest,
                 "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "seconds_this_session": round(seconds, 1), "estimated_minutes": round(unit.minutes, 1),
                 "cpu": unit_cpu(run_dir, here)})
    results.write_table(os.path.join(results_dir, "manifest.csv"), rows)


def status(args, unit: Unit) -> str:
    """A unit's status in the plan: "done" (listed in the manifest, its tables checked by
    :func:`check_units_present`), "done under <runs>, to copy" (finished there, never copied: ``run``
    copies it first) or "to run"."""
    from vaco_jax.driver import runner
    if unit.name in {r["unit"] for r in manifest(args.results)}:
        return "done"
    if runner.group_finished(os.path.join(args.runs, unit.stage, unit.group.subdir)):
        return f"done under {args.runs}, to copy"
    return "to run"


def finished(args, unit: Unit) -> bool:
    """Listed in the manifest, or its group finished in the run directories (not yet copied)."""
    from vaco_jax.driver import runner
    done = {r["unit"] for r in manifest(args.results)}
    return unit.name in done or runner.group_finished(os.path.join(args.runs, unit.stage, unit.group.subdir))


def select(units: list[Unit], args, budget: float | None = None, first: bool = True,
           pace: float = 1.0) -> list[Unit]:
    """``--units`` as named, or the next unfinished units in order whose summed estimate, times
    ``pace`` (measured over estimated time of the units this call has run), fits ``budget`` minutes
    (at least one when ``first``, the call's first round; a study unit never with unfinished tuning,
    whose choices it needs)."""
    names = {u.name: u for u in units}
    if args.units:
        bad = [n for n in args.units if n not in names]
        if bad:
            raise ConfigError(f"units: {bad} not valid now; allowed values: {', '.join(names)}")
        return [names[n] for n in args.units]
    out, spent = [], 0.0
    for u in units:
        if finished(args, u):
            continue
        if spent + u.minutes * pace > budget and (out or not first):
            break
        if u.stage == "study" and any(x.stage == "tuning" for x in out):
            break
        out.append(u)
        spent += u.minutes * pace
    return out


def check_minutes(args) -> None:
    """``run`` needs a budget: ``--minutes`` (a positive number) or ``--units``."""
    if not args.units and (args.minutes is None or not args.minutes > 0):
        raise ConfigError(f"minutes={args.minutes!r}: give --minutes (a positive number) or --units")


def check_dry_run(args) -> None:
    if args.dry_run and args.stage == "report":
        raise ConfigError("dry_run: --dry-run applies to run (plan runs nothing; report writes the verdicts and "
                          "figures)")


def dry_run_units(units: list[Unit], digest: str, args, tuned_needed: bool = False) -> list:
    """``run --dry-run``: the units this call would start with (``select``, as ``run`` chooses its first
    round), each unit's plan, memory estimate and estimated minutes at the protocol's measured rates;
    nothing compiled or written (a changed protocol is reported, not recorded)."""
    from vaco_jax.driver import dryrun

    try:
        check_protocol_unchanged(args.results, digest, "", args.protocol)
    except ConfigError as e:
        if not args.deviation:
            raise
        print(f"{e}: a run records the --deviation given first")
    chosen = select(units, args, args.minutes, first=True)
    if not chosen:
        print("every unit has finished" if all(finished(args, u) for u in units) else
              "nothing to run: the next units wait for tuning to be frozen (run `plan`)")
        return []
    if tuned_needed and any(u.stage == "study" for u in chosen):
        tuned_at = os.path.join(args.results, "tuned.json")
        raise ConfigError(f"units: study units need the frozen tuning ({tuned_at}); finish the tuning units first")
    print(f"protocol sha256 {digest}; a run would start with: {', '.join(u.name for u in chosen)} "
          f"(~{sum(u.minutes for u in chosen):.0f} min at the protocol's measured rates; it plans again after "
          "each round)")
    for u in chosen:
        print(f"\n== unit {u.name}")
        dryrun.report(os.path.join(args.runs, u.stage), [u.group],
                      estimate=[f"time estimate: ~{u.minutes:.1f} min ({u.runs} runs x the protocol's env steps "
                                f"at its measured rate for {u.group.config.env})"])
    return []
