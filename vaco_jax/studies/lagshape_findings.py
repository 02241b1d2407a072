"""FINDINGS.md's first-screen line on the lag-shape study (``results/lagshape/``), read from ``results/`` alone.

``rebuild_docs`` puts ``lagshape_summary`` in the block ``summary``: the units finished per part (from
``manifest.csv`` against the parts the protocol names), the age-19 check's calls (``age19_check.csv``), the Ant-v4 pilot's
answer (``ant_pilot.csv``) and, once any publish arm has finished, the publish check's rows (``publish_check.csv``).
"""

from __future__ import annotations

import hashlib
import os

from vaco_jax.analysis import results

LAGSHAPE = os.path.join("results", "lagshape")
PARTS = ("publish", "pilot", "shape", "tuning", "study")


def _calls(rows: list[dict]) -> str:
    """Per quantity, each counterpart's call: 'retention ppo_clip: histogram inconclusive, ...'."""
    by: dict[str, list[str]] = {}
    for r in rows:
        by.setdefault(f"{r['quantity']} {r['method']}", []).append(f"{r['variant']} {r['verdict']}")
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in by.items())


def lagshape_summary(root: str) -> str | None:
    out = os.path.join(root, LAGSHAPE)
    path = os.path.join(out, "protocol.json")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    listed = results.read_table(os.path.join(out, "manifest.csv")) if os.path.exists(os.path.join(out, "manifest.csv")) else []
    done = {p: sum(r["unit"].startswith(f"{p}/") for r in listed) for p in PARTS}
    line = (f"- **The lag-shape study** (`results/lagshape/`, protocol sha256 `{digest[:8]}…`, fixed before its runs): "
            f"units finished: {', '.join(f'{p} {n}' for p, n in done.items())} "
            f"(`python -m vaco_jax.studies.lagshape plan` lists every unit).")
    age19 = os.path.join(out, "age19_check.csv")
    if os.path.exists(age19):
        rows = results.read_table(age19)
        line += (" Age-19 check, margin half the control's own effect (`age19_check.csv`): "
                 + _calls(rows) + "; the control must be called *differs*.")
    pilot = os.path.join(out, "ant_pilot.csv")
    if os.path.exists(pilot):
        rows = results.read_table(pilot)
        left = [r["leaves_random_at"] for r in rows]
        line += (f" Ant-v4 pilot (PPO-Clip, B = {rows[0]['lag_depth']}, `ant_pilot.csv`): 1M env steps is "
                 f"{'a usable' if rows[0]['usable_reference'] else 'not a usable'} reference "
                 f"({sum(bool(r['by_horizon']) for r in rows)} of {len(rows)} seeds leave random by 1M; env steps "
                 "to leave random: " + ", ".join(f"{int(x):,}" if str(x).isdigit() else str(x) for x in left) + ").")
    publish = os.path.join(out, "publish_check.csv")
    if os.path.exists(publish):
        rows = results.read_table(publish)
        line += (" Publish model against the real publish8 runs (`publish_check.csv`, margin ±0.15): "
                 + "; ".join(f"{r['quantity']} {r['method']}: simulated {r['sim']:.2f} against real {r['real']:.2f}, "
                             f"{r['verdict']} (the i.i.d. histogram: {r['histogram_sim']:.2f}, {r['histogram_verdict']})"
                             for r in rows) + ".")
    return line
