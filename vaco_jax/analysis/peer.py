"""The peer check's records (``benchmarks/peer_check.py`` writes them, ``results/peer_check/``) beside
CleanRL's published PPO table: per seed, mean ± std, and whether it falls inside their mean ± 2 std.
A record is ours (vaco_jax's trainer) or, when ``peer_check --cleanrl-logs`` wrote it, CleanRL's own
script run on this machine; the table says which. No jax: FINDINGS.md's summary and BENCHMARKS.md read them the same way."""

from __future__ import annotations

import glob
import os

import numpy as np

from vaco_jax.analysis import results

# CleanRL's ppo_continuous_action at 1M env steps (its documentation's table: mean ± std over seeds)
CLEANRL = {"Hopper-v4": (2382.86, 271.74), "HalfCheetah-v4": (1442.64, 46.03), "Walker2d-v4": (2287.95, 571.78)}
# Where CleanRL publishes no figure: another published 1M-step PPO number (mean ± std over seeds) and what it
# measures. Tianshou's MuJoCo benchmark (github.com/thu-ml/tianshou, examples/mujoco/README.md, "PPO",
# column "Tianshou (1M)"): Ant-v3 on gym 0.17.3 / MuJoCo 2.0, 10 seeds, the largest average test return
# seen during training -- a higher bar than our score (the training episodes of the last 5%), and the same
# robot model as Ant-v4 on an older engine. The same table quotes Spinning Up's PPO at ~650.
OTHER = {"Ant-v4": (3258.4, 1079.3, "Tianshou's PPO, Ant-v3, best average test return in 1M steps")}


def published(task: str) -> tuple[float, float, str] | None:
    """(mean, std, source) of the published 1M-step PPO figure a task is checked against, if any."""
    if task in CLEANRL:
        return (*CLEANRL[task], "CleanRL's ppo_continuous_action")
    return OTHER.get(task)


def summary(record: dict) -> dict:
    s = np.array([np.nan if v is None else v for v in record["scores"]], float)
    ok = s[np.isfinite(s)]
    mean = float(ok.mean()) if len(ok) else float("nan")
    std = float(ok.std(ddof=1)) if len(ok) > 1 else float("nan")
    ref = published(record["task"])
    inside = None if ref is None or not np.isfinite(mean) else ref[0] - 2 * ref[1] <= mean <= ref[0] + 2 * ref[1]
    trainer = "CleanRL's script" if "logs" in record else "vaco_jax"
    return {"task": record["task"], "settings": record["settings"], "trainer": trainer, "mean": mean, "std": std, "seeds": ok.tolist(),
            "n_diverged": int(np.sum(record.get("diverged", []))), "cleanrl": ref and ref[:2], "source": ref and ref[2],
            "inside": inside}


def records(folder: str) -> list[dict]:
    return [summary(results.read_json(p)) for p in sorted(glob.glob(os.path.join(folder, "*.json")))]


def table(folder: str) -> str:
    """A markdown table of every record in ``folder`` beside CleanRL's published figure."""
    lines = ["| task | trainer | settings | mean ± std (seeds) | per seed | published 1M (CleanRL unless named) | "
             "inside ± 2 std |", "|---|---|---|---|---|---|---|"]
    for r in records(folder):
        ref = r["cleanrl"]
        inside = "—" if r["inside"] is None else ("yes" if r["inside"] else
                                                  "**no**, " + ("above" if r["mean"] > ref[0] else "below"))
        lines.append(f"| {r['task']} | {r['trainer']} | {r['settings']} | {r['mean']:.1f} ± {r['std']:.1f} ({len(r['seeds'])}) | "
                     f"{', '.join(f'{v:.0f}' for v in r['seeds'])} | "
                     f"{'' if not ref else f'{ref[0]:.2f} ± {ref[1]:.2f}'}"
                     f"{'' if not ref or r['source'].startswith('CleanRL') else ' (' + r['source'] + ')'} | {inside} |")
    return "\n".join(lines)
