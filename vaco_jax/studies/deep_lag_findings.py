"""FINDINGS.md's tables of the deep-lag study (``results/deep_lag/``), read from ``results/`` alone.

``rebuild_docs.BLOCKS`` names ``deep_lag_table`` (block ``deep_lag``: the study's arms, verdicts and wall
clock as ``experiments/deep_lag.py report`` wrote them to ``arms.csv``, ``verdicts.csv`` and
``wall_clock.csv``) and the first screen's line ``deep_lag_summary`` (real runs per configuration,
simulated programs finished, the verdicts once reported). The programs are counted by the study's layout
(``deep_lag_programs``) under the protocol the study wrote (``study_protocol.json``).
"""

from __future__ import annotations

import glob
import math
import os

import numpy as np

from vaco_jax.analysis import results
from vaco_jax.studies.deep_lag_programs import PROGRAM_CELLS, programs_of
from vaco_jax.studies.kit_findings import num, table

DEEP_LAG = os.path.join("results", "deep_lag")


def deep_lag_summary(root: str) -> str | None:
    """FINDINGS.md's first-screen line on the deep-lag study: real runs per configuration and their
    realised mean age, simulated programs finished, and the verdicts once its report has run."""
    out = os.path.join(root, DEEP_LAG)
    if not os.path.exists(os.path.join(out, "study_protocol.json")):
        return None
    spec = results.read_json(os.path.join(out, "study_protocol.json"))
    parts, counts = [], []
    for config in sorted(os.listdir(os.path.join(out, "real"))) if os.path.isdir(os.path.join(out, "real")) else []:
        runs = [results.read_json(path) for path in
                sorted(glob.glob(os.path.join(out, "real", config, "*", "seed*", "score.json")))]
        ages = [r["mean_age"] for r in runs if r.get("mean_age") is not None]
        parts.append(f"{config} {len(runs)} (mean age {num(np.mean(ages) if ages else math.nan, '.2f')})")
        counts.append(len(runs))
    want = len(spec["methods"]) * len(spec["study"]["real_seeds"])

    programs = programs_of(out, spec["study"], spec["configurations"], spec["methods"],
                           PROGRAM_CELLS[spec["preset"]])
    done = sum(os.path.exists(os.path.join(where, "scores.csv")) for where in programs)
    verdicts = os.path.join(out, "verdicts.csv")
    if os.path.exists(verdicts):
        rows = results.read_table(verdicts)
        calls = {v: [r["verdict"] for r in rows if r["variant"] == v] for v in dict.fromkeys(r["variant"] for r in rows)}
        state = (f"verdicts over the {len(rows) // max(len(calls), 1)} rows per counterpart (the contrast and the "
                 "retentions at each deep configuration) — "
                 + "; ".join(f"{v}: " + ", ".join(f"{c.count(k)} {k}" for k in ("predicts", "differs", "inconclusive"))
                             for v, c in calls.items())
                 + " (the control must be called *differs*)")
    else:
        real_done = len(counts) == len(spec["configurations"]) and all(n == want for n in counts)
        state = ("no verdict yet (`python experiments/deep_lag.py report` runs once every simulated program has "
                 "finished)" if real_done else "no verdict yet (the simulated sweeps follow the real runs)")
    return (f"- **The deep-lag study** (`results/deep_lag/`, {spec['task']}, "
            f"{', '.join(spec['methods'])}): real runs per configuration (of {want}): " + "; ".join(parts)
            + f"; simulated programs finished: {done} of {len(programs)}; {state}.")


def deep_lag_table(root: str) -> str:
    """The deep-lag study once its report has run: every arm's runs, realised mean age and AUC
    (``arms.csv``), the verdicts on the contrast and the retentions (``verdicts.csv``) and the real
    configurations' wall clock (``wall_clock.csv``)."""
    from vaco_jax.analysis import plotting

    out = os.path.join(root, DEEP_LAG)
    names = ("arms.csv", "verdicts.csv", "wall_clock.csv")
    if not all(os.path.exists(os.path.join(out, n)) for n in names):
        return ("No verdict yet: `python experiments/deep_lag.py report` runs once every real run and simulated "
                "program has finished.\n")
    arms, verdicts, wall = (results.read_table(os.path.join(out, n)) for n in names)

    def where(r):
        return r["configuration"] if r["layout"] == r["configuration"] else f"{r['configuration']} ({r['layout']})"

    def method(m):
        return " − ".join(plotting.method_label(x.strip()) for x in str(m).split(" - "))

    rows = [[where(r), method(r["method"]), r["variant"],
             str(int(r["runs"])) + (f" ({int(r['diverged'])} diverged)" if int(r["diverged"]) else ""),
             num(r["mean_age"], ".2f"), f"{num(r['auc_mean'], ',.0f')} ± {num(r['auc_sd'], ',.0f')}"]
            for r in arms]
    text = ["Every arm (`results/deep_lag/arms.csv`): per configuration and method, the real runs and each "
            "simulated counterpart — `histogram` (the real runs' pooled ages), `uniform` (the same mean age), "
            "`control` (the histogram 8 versions older), `lockstep` (synchronous) — with the runs (diverged ones "
            "left out of the mean), the realised mean age of the consumed samples and the area under the "
            "evaluation curve (mean ± sd over seeds).", "",
            table(["configuration", "method", "arm", "runs", "mean age", "AUC"], rows).rstrip("\n"), ""]
    margin = num(verdicts[0]["margin"], "g") if verdicts else "—"
    rows = [[r["quantity"], where(r), method(r["method"]), r["variant"],
             f"{num(r['real_mean_age'], '.2f')} / {num(r['sim_realised_mean_age'], '.2f')}",
             num(r["real"], ".3f"), num(r["sim"], ".3f"), num(r["difference"], ".3f"),
             f"[{num(r['low'], '.3f')}, {num(r['high'], '.3f')}]", f"**{r['verdict']}**"] for r in verdicts]
    text += [f"The verdicts (`results/deep_lag/verdicts.csv`): the contrast C = (VACO − PPO-Clip) / the real "
             f"lockstep PPO-Clip mean and each method's retention R = deep / lockstep, real and simulated, "
             f"simulated − real with its 90% bootstrap interval; *predicts* inside ±{margin}, *differs* wholly "
             f"outside, else *inconclusive*.", "",
             table(["quantity", "configuration", "method", "counterpart", "mean age real / sim", "real", "sim",
                    "sim − real", "90% CI", "verdict"], rows).rstrip("\n"), ""]
    controls = [r for r in verdicts if r["variant"] == "control"]
    if controls and any(r["verdict"] != "differs" for r in controls):
        text += [f"The negative control is not called *differs* in "
                 f"{sum(r['verdict'] != 'differs' for r in controls)} of {len(controls)} rows: there the rule "
                 f"cannot tell a wrong histogram from a right one.", ""]
    rows = [[where(r), method(r["method"]) if r["method"] != "all" else "both", str(int(r["runs"])),
             num(r["mean_age"], ".2f"), num(r["env_steps_per_second"], ",.0f"),
             "never (median)" if not math.isfinite(float(r["seconds_to_threshold"])) else
             num(r["seconds_to_threshold"], ",.0f"), f"{int(r['reached'])} / {int(r['runs'])}",
             num(r["load_start"], ".2f")] for r in wall]
    threshold = num(wall[0]["threshold"], ",.0f") if wall else "—"
    text += [f"Wall clock of the real runs (`results/deep_lag/wall_clock.csv`; medians over seeds): env steps per "
             f"second, seconds to the first evaluation with return ≥ {threshold} (*never* when half the runs or "
             f"more never reach it), the runs that reach it, and the load average as each run started.", "",
             table(["configuration", "method", "runs", "mean age", "env steps/s", "s to threshold", "reached",
                    "start load"], rows)]
    return "\n".join(text)
