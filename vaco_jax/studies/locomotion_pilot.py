"""The locomotion study's pilot (tuning seeds; not part of the study): how much lag hurts a tuned PPO-Clip
on Hopper-v4, how far seeds spread, and the smallest difference 10 seeds can detect.

    python experiments/locomotion_pilot.py run       # ~1 hour on 2 CPU cores; resumable
    python experiments/locomotion_pilot.py report    # the table; writes results/locomotion/pilot/

``run`` is the lag sweep with the pilot's settings: PPO-Clip and VACO on Hopper-v4 (MuJoCo's C engine)
at B = 1 and B = 32, the task's own defaults (config.TASK_DEFAULTS: the peer-checked settings), tuning
seeds 100-102, 1M env steps a run, VACO at two TV budgets an order of magnitude apart. ``report`` reads
the run directory's scores, prints per (method, TV budget, B) the mean and std over seeds of the final
return and the AUC, the lag effect (B = 1 minus B = 32, with a 95% bootstrap interval), and the minimum
detectable difference of a two-sample comparison with 10 seeds a side (two-sided 5%, power 80%:
2.8 x sqrt(2) x the pooled std / sqrt(10)), then copies the small tables under
``results/locomotion/pilot/``.
"""

from __future__ import annotations

import csv
import os
import sys

import numpy as np

RUN_DIR = os.path.join("runs", "locomotion_pilot")
OUT = os.path.join("results", "locomotion", "pilot")
TV_BUDGETS = (0.02, 0.2)
SEEDS = (100, 101, 102)
SCORES = ("final_eval_return", "auc_eval_return")


def command() -> list[str]:
    return ["--preset", "cpu_locomotion", "--methods", "ppo_clip", "vaco", "--lag-depths", "1", "32",
            "--seeds", *map(str, SEEDS), "--total-env-steps", "1000000", "--num-evals", "20",
            "--sweep", "tv_budget=" + ",".join(map(str, TV_BUDGETS)), "--out", RUN_DIR, "--no-progress"]


def rows(run_dir: str = RUN_DIR) -> list[dict]:
    out = []
    for method in ("ppo_clip", "vaco"):
        path = os.path.join(run_dir, "Hopper-v4", method, "scores.csv")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            out += [r for r in csv.DictReader(line for line in f if not line.startswith("#"))]
    return out


def _bootstrap_difference(a: np.ndarray, b: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), (reps, len(a)))].mean(1)
    db = b[rng.integers(0, len(b), (reps, len(b)))].mean(1)
    return tuple(np.quantile(da - db, [0.025, 0.975]))


def report(run_dir: str = RUN_DIR) -> str:
    data = rows(run_dir)
    if not data:
        raise SystemExit(f"no scores under {run_dir}: run `python experiments/locomotion_pilot.py run` first")
    groups: dict[tuple, dict] = {}
    for r in data:
        if r["diverged"] == "True":
            continue
        key = (r["method"], r.get("tv_budget", "") or "", int(r["lag_depth"]))
        for s in SCORES:
            groups.setdefault(key, {}).setdefault(s, []).append(float(r[s]))
    lines = [f"pilot on Hopper-v4 ({run_dir}); diverged runs: {sum(r['diverged'] == 'True' for r in data)}"]
    for s in SCORES:
        lines.append(f"\n{s}: mean +- std over seeds (n)")
        stds = []
        for key in sorted(groups):
            v = np.asarray(groups[key][s])
            stds.append(v.std(ddof=1) if len(v) > 1 else np.nan)
            lines.append(f"  {key[0]:<9} {('tv=' + key[1]) if key[1] else '':<9} B={key[2]:<3} {v.mean():9.1f} +- "
                         f"{stds[-1]:7.1f} ({len(v)})")
        for (method, tv) in sorted({k[:2] for k in groups}):
            if (method, tv, 1) in groups and (method, tv, 32) in groups:
                a, b = np.asarray(groups[(method, tv, 1)][s]), np.asarray(groups[(method, tv, 32)][s])
                lo, hi = _bootstrap_difference(a, b)
                lines.append(f"  lag effect {method} {tv}: B=1 - B=32 = {a.mean() - b.mean():.1f} [{lo:.1f}, {hi:.1f}]")
        pooled = float(np.sqrt(np.nanmean(np.square(stds))))
        lines.append(f"  pooled seed std {pooled:.1f}; minimum detectable difference with 10 seeds a side "
                     f"(5% two-sided, 80% power): {2.8 * np.sqrt(2.0) * pooled / np.sqrt(10):.1f}")
    from vaco_jax.analysis import results

    text = "\n".join(lines)
    os.makedirs(OUT, exist_ok=True)
    for method in ("ppo_clip", "vaco"):
        for name in ("scores.csv", "curves.csv"):
            src = os.path.join(run_dir, "Hopper-v4", method, name)
            if os.path.exists(src):
                results.atomic_copy(src, os.path.join(OUT, f"{method}_{name}"))
    results.atomic_write_text(os.path.join(OUT, "report.txt"), text + "\n")
    return text


USAGE = ("usage: python experiments/locomotion_pilot.py run [LAG-SWEEP FLAGS] | report\n\n"
         "run: the lag sweep with the pilot's settings (`run --help` lists the lag sweep's flags, e.g. --dry-run: "
         "the plan, memory and time estimates, nothing run); report: the pilot's table from its run directory")


def main(argv: list[str]) -> None:
    if argv[:1] == ["run"]:
        from vaco_jax.studies import lag_sweep

        from vaco_jax.driver.cli import cli_main, parse_args

        cli_main(lag_sweep.main, parse_args(lag_sweep.Args, command() + argv[1:]))
    elif argv[:1] == ["report"]:
        print(report())
    elif argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
    else:
        raise SystemExit(USAGE)


def cli() -> None:
    """The command line (`experiments/locomotion_pilot.py`, `python -m vaco_jax locomotion-pilot`)."""
    main(sys.argv[1:])


if __name__ == "__main__":
    cli()
