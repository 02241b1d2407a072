"""Tasks as a source of variance in the step size x lag study's stage-2 verdicts (``results/lagshape/``).

Two tables, computed from the committed stage-2 scores (``results/steplag/stage2``) by the committed
rules (``kit_steplag.stage2_verdicts``, which calls ``analysis.confirm``), never replacing them:

* ``leave_one_task_out.csv``: every stage-2 verdict (the primary family, the per-task rows, the lag-shape
  rule's pairs and its overall call) recomputed with one task's runs set aside, a row per (task left
  out, verdict), beside the committed verdict and whether it changed. The normalisation is per task, so
  the other tasks' scores are unchanged; what changes is which tasks a pooled test averages over.
* ``hierarchical_verdicts.csv``: the primary family with the tasks resampled too (a two-stage bootstrap:
  tasks with replacement, then each drawn task's runs; ``confirm.hierarchical_replicates``), Holm and
  the verdict call unchanged, beside the committed (tasks fixed) row. The committed rule treats the
  tasks as fixed; this one asks whether a verdict holds for tasks like these.

``python -m vaco_jax.studies.lagshape loto`` (the study's command) writes both (each with its ``.sha256``) and prints what
changed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from tyro.conf import Positional

LOTO = "leave_one_task_out.csv"
HIERARCHICAL = "hierarchical_verdicts.csv"
STAGE2_VERDICTS = "stage2_verdicts.csv"  # steplag.STAGE2_VERDICTS, the committed table
STAGE2_SHAPE = "stage2_shape.csv"
KEY = ("family", "test", "arm", "lag_model", "lag_depth")  # a verdict's identity across the tables
NUMBERS = ("point", "low", "high", "difference", "difference_low", "difference_high", "p_value", "p_holm")


@dataclasses.dataclass
class Args:
    command: Positional[Literal["loto"]]  # loto: write leave_one_task_out.csv and hierarchical_verdicts.csv
    steplag: str = "results/steplag"  # the step size x lag study's results (protocol.json, stage2/, tables)
    out: str = "results/lagshape"  # where the two tables go


def load(steplag_dir: str) -> dict:
    """The step size x lag study's protocol (its ``stage2`` section holds the rules' numbers)."""
    from vaco_jax.studies import kit

    p, _ = kit.load_protocol(os.path.join(steplag_dir, "protocol.json"))
    return p


def verdict_rows(p: dict, steplag_dir: str, leave_out: tuple = (), tasks: str = "fixed") -> list[dict]:
    """Every stage-2 verdict as rows keyed by ``KEY``: the primary and per-task rows as
    ``stage2_verdicts.csv`` has them, then the shape rule's pairs (``family`` 'shape', ``arm`` the pair)
    and its overall call (``arm`` 'overall')."""
    from vaco_jax.studies.kit_steplag import stage2_rows, stage2_verdicts

    every = [r for r in stage2_rows(steplag_dir) if r["env"] not in leave_out]
    v = stage2_verdicts(p, every, steplag_dir, tasks=tasks)
    out = [{"family": "primary", **r} for r in v["primary"]] + [{"family": "per task", **r} for r in v["per_task"]]
    shape = v["shape"]
    models = " ".join(shape["models"])
    for pair in shape["pairs"]:
        out.append({"family": "shape", "test": "contrast change", "arm": pair["pair"], "lag_model": models,
                    "lag_depth": shape["lag_depth"], "tasks": pair["tasks"], "point": pair.get("change"),
                    "low": pair.get("low"), "high": pair.get("high"), "p_value": pair.get("p_value"),
                    "p_holm": pair.get("p_holm"), "verdict": pair["verdict"]})
    out.append({"family": "shape", "test": "contrast change", "arm": "overall", "lag_model": models,
                "lag_depth": shape["lag_depth"], "verdict": shape["overall"]})
    return out


def _key(row: dict) -> tuple:
    # per-task rows share (test, arm, lag model, B) across tasks: their task tells them apart
    return tuple(str(row.get(k)) for k in KEY) + ((row["tasks"],) if row["family"] == "per task" else ())


def committed_rows(steplag_dir: str) -> list[dict]:
    """The committed verdicts (``stage2_verdicts.csv``, ``stage2_shape.csv``) in :func:`verdict_rows`' form."""
    from vaco_jax.analysis import results

    rows = results.read_table(os.path.join(steplag_dir, STAGE2_VERDICTS))
    shape = results.read_table(os.path.join(steplag_dir, STAGE2_SHAPE))
    for r in shape:
        rows.append({"family": "shape", "test": "contrast change", "arm": r["pair"], "lag_model": r["models"],
                     "lag_depth": r["lag_depth"], "tasks": r["tasks"], "verdict": r["verdict"]})
    if shape:
        rows.append({"family": "shape", "test": "contrast change", "arm": "overall", "lag_model": shape[0]["models"],
                     "lag_depth": shape[0]["lag_depth"], "verdict": shape[0]["overall"]})
    return rows


def tasks_of(steplag_dir: str) -> list[str]:
    from vaco_jax.studies.kit_steplag import stage2_rows

    return sorted({r["env"] for r in stage2_rows(steplag_dir)})


def leave_one_task_out(p: dict, steplag_dir: str) -> list[dict]:
    """A row per (task left out, stage-2 verdict): the recomputed numbers and verdict beside the committed
    verdict; a per-task row of the task left out is absent (``verdict`` 'left out')."""
    committed = {_key(r): r for r in committed_rows(steplag_dir)}
    out = []
    for task in tasks_of(steplag_dir):
        got = {_key(r): r for r in verdict_rows(p, steplag_dir, leave_out=(task,))}
        for key, c in committed.items():
            r = got.get(key)
            verdict = r["verdict"] if r is not None else "left out"
            out.append({"left_out": task, "family": c["family"], "test": c["test"], "arm": c["arm"],
                        "lag_model": c["lag_model"], "lag_depth": c["lag_depth"], "tasks": (r or {}).get("tasks", ""),
                        **{n: (r or {}).get(n) for n in NUMBERS}, "verdict": verdict,
                        "committed_tasks": c.get("tasks", ""), "committed_verdict": c["verdict"],
                        "changed": r is not None and verdict != c["verdict"]})
    return out


def hierarchical(p: dict, steplag_dir: str) -> list[dict]:
    """The primary family with the tasks resampled, a row per test beside the committed row."""
    committed = {_key(r): r for r in committed_rows(steplag_dir) if r["family"] == "primary"}
    out = []
    for r in verdict_rows(p, steplag_dir, tasks="resampled"):
        if r["family"] != "primary":
            continue
        c = committed[_key(r)]
        out.append({"test": r["test"], "arm": r["arm"], "reference": r["reference"], "lag_model": r["lag_model"],
                    "lag_depth": r["lag_depth"], "tasks": r["tasks"], "point": r.get("point"),
                    **{f"committed_{n}": c.get(n) for n in ("low", "high", "difference_low", "difference_high",
                                                           "p_holm")},
                    **{f"resampled_{n}": r.get(n) for n in ("low", "high", "difference_low", "difference_high",
                                                           "p_value", "p_holm")},
                    "committed_verdict": c["verdict"], "verdict": r["verdict"], "changed": r["verdict"] != c["verdict"]})
    return out


def _describe(row: dict) -> str:
    return f"{row['test']} {row['arm']} {row['lag_model']} B={row['lag_depth']}"


def main(args: Args) -> list[str]:
    from vaco_jax.analysis import results

    p = load(args.steplag)
    loto, hier = leave_one_task_out(p, args.steplag), hierarchical(p, args.steplag)
    os.makedirs(args.out, exist_ok=True)
    results.write_table(os.path.join(args.out, LOTO), loto)
    results.write_table(os.path.join(args.out, HIERARCHICAL), hier)
    lines = [f"wrote {os.path.join(args.out, LOTO)} ({len(loto)} rows), {os.path.join(args.out, HIERARCHICAL)} "
             f"({len(hier)} rows)"]
    for r in loto:
        if r["changed"]:
            lines.append(f"without {r['left_out']}: {_describe(r)}: {r['committed_verdict']} -> {r['verdict']}")
    for r in hier:
        if r["changed"]:
            lines.append(f"tasks resampled: {_describe(r)}: {r['committed_verdict']} -> {r['verdict']}")
    print("\n".join(lines))
    return lines


def cli() -> None:
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
