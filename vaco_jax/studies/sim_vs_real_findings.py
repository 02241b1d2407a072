"""FINDINGS.md's tables of the sim-vs-real study (``results/sim_vs_real/``), read from ``results/`` alone.

``rebuild_docs.BLOCKS`` names ``sim_vs_real_table`` (block ``sim_vs_real``) and the first screen's line
``sim_vs_real_summary``: per real configuration and method, the real runs' realised mean age, speed (also
as a multiple of the lockstep configuration's) and scores; once ``verdicts.csv`` exists
(``experiments/sim_vs_real.py report``), each simulated counterpart's scaled difference from the real
runs with its interval and the protocol's verdict.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from vaco_jax.analysis import results
from vaco_jax.studies.kit_findings import mean_sd, num, table
from vaco_jax.studies.kit_real import real_score

SIM_VS_REAL = os.path.join("results", "sim_vs_real")


def _protocol(root: str) -> dict:
    with open(os.path.join(root, SIM_VS_REAL, "protocol.json")) as f:
        return json.load(f)


def _real_runs(root: str) -> dict[tuple[str, str], list[dict]]:
    """Each finished real run's score, at the simulator's evaluation points (``kit_real.real_score``)."""
    num_evals = int(_protocol(root)["preset"]["num_evals"])
    out: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(root, SIM_VS_REAL, "real", "*", "*", "seed*", "score.json"))):
        seed_dir = os.path.dirname(path)
        method_dir = os.path.dirname(seed_dir)
        key = (os.path.basename(os.path.dirname(method_dir)), os.path.basename(method_dir))
        out.setdefault(key, []).append(real_score(seed_dir, num_evals))
    return out


def sim_vs_real_table(root: str) -> str:
    """The sim-vs-real study's real runs and, once reported, its verdicts (see the module's docstring)."""
    from vaco_jax.analysis import plotting

    runs = _real_runs(root) if os.path.exists(os.path.join(root, SIM_VS_REAL, "protocol.json")) else {}
    if not runs:
        return "No real run of the sim-vs-real study has finished (`python experiments/sim_vs_real.py plan`).\n"
    configs = [c["name"] for c in _protocol(root)["configurations"] if any(k[0] == c["name"] for k in runs)]
    methods = plotting.sort_methods({m for _, m in runs})
    sync = [r for (c, _), rs in runs.items() if c.startswith("sync") for r in rs]
    sync_speed = float(np.mean([r["env_steps_per_second"] for r in sync])) if sync else float("nan")
    rows = []
    for c in configs:
        for m in methods:
            rs = runs.get((c, m), [])
            if not rs:
                continue
            kept = [r for r in rs if not r["diverged"]]
            speed = float(np.mean([r["env_steps_per_second"] for r in rs]))
            auc, sd = mean_sd([r["auc_eval_return"] for r in kept])
            final, final_sd = mean_sd([r["final_eval_return"] for r in kept])
            rows.append([c, plotting.method_label(m), str(len(rs)) + (f" ({len(rs) - len(kept)} diverged)"
                                                                      if len(kept) < len(rs) else ""),
                         num(np.mean([r["mean_age"] for r in rs]), ".2f"), num(speed, ",.0f"),
                         num(speed / sync_speed, ".2f") + "×", f"{num(auc, ',.0f')} ± {num(sd, ',.0f')}",
                         f"{num(final, ',.0f')} ± {num(final_sd, ',.0f')}"])
    out = ["The real runs (`results/sim_vs_real/real/`): per configuration and method, the seeds run, the "
           "realised mean age of the consumed samples, env steps per second (and as a multiple of the lockstep "
           "configuration's, both methods pooled), and the area under the evaluation curve and final return "
           "(mean ± standard deviation over seeds) at the simulator's evaluation points.", "",
           table(["configuration", "method", "runs", "mean age", "env steps/s", "× lockstep", "AUC", "final return"],
                 rows)]
    verdicts = os.path.join(root, SIM_VS_REAL, "verdicts.csv")
    if not os.path.exists(verdicts):
        out.append("No verdict yet: `python experiments/sim_vs_real.py sim`, then `report`, once every real run is in.\n")
        return "\n".join(out)
    vrows = results.read_table(verdicts)
    by = {(r["configuration"], r["method"], r["variant"], r["score"]): r for r in vrows}
    variants = list(dict.fromkeys(r["variant"] for r in vrows))
    rows = []
    for c in configs:
        for m in methods:
            for v in variants:
                cells = [by.get((c, m, v, s)) for s in ("auc_eval_return", "final_eval_return")]
                if not any(cells):
                    continue
                first = next(x for x in cells if x)
                rows.append([c, plotting.method_label(m), v, num(first["sim_mean_age"], ".2f") + " / "
                             + num(first.get("sim_realised_mean_age"), ".2f")]
                            + [f"{num(x['sim_mean'], ',.0f')}: {num(x['scaled_difference'], '+.3f')} "
                               f"[{num(x['low'], '+.3f')}, {num(x['high'], '+.3f')}] {x['verdict']}" if x else "—"
                               for x in cells])
    margin = num(vrows[0]["margin"], ".2f")
    out += ["The simulated counterparts (`results/sim_vs_real/verdicts.csv`): per configuration, method and "
            "variant, the mean age the simulator was given and the mean age it realised (its samples' ages, "
            "clipped to the phase index early in training), then for each score the simulated mean, the difference of means "
            "(sim − real) over the method's real lockstep mean with its 90% bootstrap interval, and the verdict "
            f"(predicts: the interval inside ±{margin}; differs: wholly outside).", "",
            table(["configuration", "method", "variant", "sim mean age: given / realised", "AUC: sim, (sim − real)/lockstep",
                   "final return: sim, (sim − real)/lockstep"], rows)]
    return "\n".join(out)


def sim_vs_real_summary(root: str) -> str | None:
    """FINDINGS.md's first-screen line on the sim-vs-real study (None before its first real run)."""
    runs = _real_runs(root) if os.path.exists(os.path.join(root, SIM_VS_REAL, "protocol.json")) else {}
    if not runs:
        return None
    n = sum(len(v) for v in runs.values())
    verdicts = os.path.join(root, SIM_VS_REAL, "verdicts.csv")
    if not os.path.exists(verdicts):
        return (f"- **The sim-vs-real study** (`results/sim_vs_real/`): {n} real runs in; no verdict yet "
                "(`python experiments/sim_vs_real.py plan`).")
    task = _protocol(root)["preset"].get("task", "?")
    rows = [r for r in results.read_table(verdicts) if not str(r["configuration"]).startswith("sync")]
    parts = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r["verdict"] for r in rows if r["variant"] == variant]
        counts = ", ".join(f"{mine.count(v)} {v}" for v in ("predicts", "differs", "inconclusive"))
        parts.append(f"{variant}: {counts}")
    return (f"- **The sim-vs-real study** (`results/sim_vs_real/`, {task}, {n} real runs): verdicts over the "
            f"{len(rows) // max(1, len(parts))} asynchronous (configuration, method, score) rows — " + "; ".join(parts)
            + ". The control must be called *differs*; *inconclusive* means the interval is wider than the margin.")
