"""The task screens' rules (``screen``, docs/evaluation.md, "Choosing tasks"): from a finished screen's
scores and curves, which tasks are learnable and lag-sensitive (:func:`screen_rows`), with their
thresholds. The screen's command (``screen``) runs the lag sweep and writes ``screens.csv`` by them;
FINDINGS.md's screen tables (``pendulum_tables``) explain each verdict by the same thresholds. It imports
no study module.
"""

from __future__ import annotations

import numpy as np

# Highest return an episode of 1000 steps can reach: DM Control rewards are in [0, 1] per step;
# Brax's inverted_pendulum pays 1 per step alive; inverted_double_pendulum pays 10 per step minus a
# distance penalty of at least ~0.64 upright (its tip stands ~1.2 below the target height 2).
# Brax's reacher and pusher pay minus distances and control costs: 0 bounds them (never reached).
REACHABLE = {"reacher": 0.0, "pusher": 0.0,
    "inverted_pendulum": 1000.0, "inverted_double_pendulum": 9360.0, "CartpoleBalance": 1000.0,
    "CartpoleSwingup": 1000.0, "AcrobotSwingup": 1000.0, "PendulumSwingup": 1000.0, "FingerSpin": 1000.0, "PointMass": 1000.0,
    # DM Control's sparse tasks pay 1 per step inside the target region: at most 1000 per episode
    "CartpoleSwingupSparse": 1000.0, "CartpoleBalanceSparse": 1000.0, "BallInCup": 1000.0,
}
CANDIDATES = ("inverted_pendulum", "inverted_double_pendulum", "CartpoleBalance", "CartpoleSwingup",
              "AcrobotSwingup", "PendulumSwingup")
LEARN_FRACTION, SATURATION, LAG_LOSS, MIN_PROGRESS = 0.5, 0.95, 0.10, 0.10
SEEDS = (100, 101)


def screen_rows(run_dir: str, tasks) -> list[dict]:
    """A row per task of a finished screen in ``run_dir``: its numbers and both verdicts."""
    from vaco_jax.analysis import results
    scores = results.load_scores(run_dir)
    curves = results.load_curves(run_dir)
    random = results.load_random_scores(run_dir) or {}
    out = []
    for task in tasks:
        rnd, top = random.get(task, np.nan), REACHABLE.get(task, np.nan)

        def final(b):
            vals = [float(r["final_eval_return"]) for r in scores if r["env"] == task and int(r["lag_depth"]) == b
                    and str(r["diverged"]) not in ("True", "1")]
            return float(np.mean(vals)) if vals else np.nan

        sync, lagged = final(1), final(16)
        chunks = sorted({int(r["chunk"]) for r in curves if r["env"] == task})
        mid = chunks[len(chunks) // 2 - 1] if len(chunks) >= 2 else None
        half = np.mean([float(r["eval_return"]) for r in curves if r["env"] == task and int(r["lag_depth"]) == 1
                        and int(r["chunk"]) == mid]) if mid is not None else np.nan
        learned = (sync - rnd) / (top - rnd)
        half_share = (half - rnd) / (sync - rnd) if sync != rnd else np.nan
        loss = 1 - (lagged - rnd) / (sync - rnd) if sync != rnd else np.nan
        learnable = bool(learned >= LEARN_FRACTION and half_share < SATURATION)
        sensitive = bool(learned >= MIN_PROGRESS and loss >= LAG_LOSS)
        out.append({"env": task, "random": rnd, "reachable": top, "ppo_clip_b1": sync, "ppo_clip_b1_half": half,
                    "ppo_clip_b16": lagged, "learned_fraction": learned, "half_over_final": half_share,
                    "lag_loss_b16": loss, "learnable": learnable, "lag_sensitive": sensitive,
                    "chosen": learnable and sensitive, "seeds": len(SEEDS)})
    return out
