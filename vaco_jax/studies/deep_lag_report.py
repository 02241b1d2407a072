"""The deep-lag study's statistics: its rule's power per number of seeds (before the runs), then its
report from the scores: the verdict rule (simulated minus real, a bootstrap interval against a margin),
the arms behind the verdicts and the real runs' wall clock.

``deep_lag`` and its parts (``deep_lag_pilot``, ``deep_lag_study``) plan and run the study, find its run
directories and write its files; what is computed from numbers lives here (the rule in words:
``deep_lag``'s docstring and docs/real_async.md, "Deep lag").
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.studies.kit_real import bootstrap_ci, mean_age, real_dir, require_finished, verdict

# ----------------------------------------------------------------------------------- power calculation
# The study's primary quantities, per deep configuration: the contrast C = (mean AUC of VACO - mean AUC of
# PPO-Clip) / the real lockstep PPO-Clip mean, and each method's retention R = mean(deep) / mean(lockstep);
# the simulator predicts one when the 90% CI of (simulated - real) lies inside +-margin. Its seed spread
# is taken from the first locomotion study's Hopper-v4 runs at the same settings (10 seeds, 1M steps, the
# B = 1 tuning) at the simulated lag of matching mean age: B = 1 for lockstep, B = 8 (3.5) for age 4,
# B = 32 (15.5) for age 16. A real run's spread is assumed equal to a simulated one's at that age.
SPREAD_SOURCE = {"study": os.path.join("results", "locomotion", "study"), "task": "Hopper-v4",
                 "methods": ("ppo_clip", "vaco"), "lags": {"lockstep": 1, "age4": 8, "age16": 32}}
Z90 = 1.6448536269514722  # the two-sided 90% interval's z


def equivalence_power(se: float, margin: float, z: float = Z90) -> float:
    """P(the interval D +- z se lies inside +-margin) when the true difference is 0 and D ~ N(0, se^2)."""
    from math import erf, sqrt

    x = (margin - z * se) / se
    return max(0.0, erf(x / sqrt(2.0)))  # 2 Phi(x) - 1


def spread(study: str = SPREAD_SOURCE["study"]) -> dict:
    """{(method, lag name): (mean AUC, seed sd)} of the runs the power calculation reads."""
    from vaco_jax.analysis import results

    out = {}
    for method in SPREAD_SOURCE["methods"]:
        rows = results.read_table(os.path.join(study, SPREAD_SOURCE["task"], method, "scores.csv"))
        for name, b in SPREAD_SOURCE["lags"].items():
            auc = np.array([float(r["auc_eval_return"]) for r in rows if int(float(r["lag_depth"])) == b])
            out[(method, name)] = (float(auc.mean()), float(auc.std(ddof=1)))
    return out


def prediction_ses(sd: dict, n_real: int, n_sim: int) -> dict:
    """The standard error of (simulated - real) for each primary quantity, by the delta method;
    contrasts are on the scale of the lockstep PPO-Clip mean."""
    ref = sd[("ppo_clip", "lockstep")][0]
    both = 1.0 / n_real + 1.0 / n_sim
    out = {}
    for age in ("age4", "age16"):
        (_, sp), (_, sv) = sd[("ppo_clip", age)], sd[("vaco", age)]
        out[f"contrast {age}"] = float(np.sqrt((sp ** 2 + sv ** 2) / ref ** 2 * both))
        for method in SPREAD_SOURCE["methods"]:
            (md, s_d), (ml, s_l) = sd[(method, age)], sd[(method, "lockstep")]
            cv2 = (s_d / md) ** 2 + (s_l / ml) ** 2
            out[f"retention {method} {age}"] = float((md / ml) * np.sqrt(cv2 * both))
    return out


def power_table(sd: dict, margin: float, seeds=(10, 15, 20, 25, 30), sim_per_real: float = 1.0) -> list[dict]:
    """Per number of real seeds (``sim_per_real`` times as many simulated), each quantity's power."""
    rows = []
    for n in seeds:
        ses = prediction_ses(sd, n, max(2, int(round(n * sim_per_real))))
        rows.append({"real_seeds": n, "sim_seeds": max(2, int(round(n * sim_per_real))),
                     **{k: equivalence_power(v, margin) for k, v in ses.items()}})
    return rows


# ----------------------------------------------------------------------------------- the report
VARIANTS = ("histogram", "uniform", "control")  # a deep configuration's simulated counterparts
CONTRAST = ("vaco", "ppo_clip")  # C = (mean of the first - mean of the second) / the real lockstep mean of the second


def contrast(x_first, x_second, scale):
    """The contrast of two methods' mean scores on the scale of the reference's."""
    return (x_first - x_second) / scale


def _mean(a) -> np.float64:
    """The mean (a NumPy float: dividing by a zero mean gives inf or nan, as in the bootstrap); nan when empty."""
    return np.float64(np.mean(a)) if len(a) else np.float64("nan")


def quantity_rows(real: dict, sim: dict, deep: list[str], variants, study: dict, methods=CONTRAST) -> list[dict]:
    """The report's verdicts from the scores alone. ``real[(configuration, method)]``: the real runs'
    scores (``lockstep`` among the configurations); ``sim[(configuration, method, variant)]``: the
    simulated ones (``sim[("lockstep", method, "lockstep")]`` the simulated lockstep). One row per deep
    configuration and variant for the contrast of ``methods`` (scale: the real lockstep mean of the second),
    then one per deep configuration, variant and method for the retention; each with the real and the
    simulated value, their difference (simulated - real), its bootstrap interval and its verdict."""
    first, second = methods
    reps, conf, margin = study["bootstrap_reps"], study["confidence"], study["margin"]
    rows = []

    def row(quantity, c, method, v, real_value, sim_value, arms_real, arms_sim, statistic):
        point, lo, hi = bootstrap_ci(arms_sim + arms_real, statistic, reps, conf)
        return {"quantity": quantity, "configuration": c, "method": method, "variant": v, "real": float(real_value),
                "sim": float(sim_value), "difference": point, "low": lo, "high": hi, "margin": margin,
                "verdict": verdict(lo, hi, margin), "n_real": min(len(a) for a in arms_real),
                "n_sim": min(len(a) for a in arms_sim)}

    with np.errstate(divide="ignore", invalid="ignore"):  # a zero mean: inf or nan, as in the bootstrap
        for c in deep:
            for v in variants:
                rf, rs, ref = real[(c, first)], real[(c, second)], real[("lockstep", second)]
                sf, ss = sim[(c, first, v)], sim[(c, second, v)]
                rows.append(row("contrast", c, f"{first} - {second}", v, contrast(_mean(rf), _mean(rs), _mean(ref)),
                                contrast(_mean(sf), _mean(ss), _mean(ref)), [rf, rs, ref], [sf, ss],
                                lambda a, b, x, y, r: contrast(a, b, r) - contrast(x, y, r)))
        for c in deep:
            for v in variants:
                for m in (second, first):
                    rd, rl = real[(c, m)], real[("lockstep", m)]
                    sd, sl = sim[(c, m, v)], sim[("lockstep", m, "lockstep")]
                    rows.append(row("retention", c, m, v, _mean(rd) / _mean(rl), _mean(sd) / _mean(sl), [rd, rl],
                                    [sd, sl], lambda a, b, x, y: a / b - x / y))
    return rows


def wall_clock_rows(out: str, spec: dict, study: dict, configs: list[dict]) -> list[dict]:
    """Per real configuration (its methods pooled, then each method): median env steps per second, median
    seconds to the first evaluation (of the simulator's ``num_evals``) at or above ``return_threshold``
    (a run that never reaches it counts as never: ``None`` when at least half never do), how many runs
    reached it, and the median 1-minute load average as training started."""
    from vaco_jax.analysis import results

    rows = []
    for c in configs:
        for methods in [tuple(spec["methods"])] + [(m,) for m in spec["methods"]]:
            sps, reach, loads, ages = [], [], [], []
            for method in methods:
                for seed in study["real_seeds"]:
                    where = real_dir(out, c, method, seed)
                    require_finished(os.path.join(where, "score.json"), "real")
                    score = results.read_json(os.path.join(where, "score.json"))
                    curve = results.read_table(os.path.join(where, "curve.csv"))[:study["num_evals"]]
                    sps.append(float(score["env_steps_per_second"]))
                    ages.append(float(score["mean_age"]))
                    hit = [float(r["seconds"]) for r in curve if float(r["eval_return"]) >= study["return_threshold"]]
                    reach.append(hit[0] if hit else float("inf"))
                    load = (score.get("load_average") or {}).get("start")
                    if load is not None:
                        loads.append(float(load))
            median_reach = float(np.median(reach))
            rows.append({"configuration": c["name"], "layout": c["configuration"],
                         "method": "all" if len(methods) > 1 else methods[0], "runs": len(sps),
                         "env_steps_per_second": float(np.median(sps)),
                         "seconds_to_threshold": median_reach if np.isfinite(median_reach) else None,
                         "threshold": study["return_threshold"],
                         "reached": int(np.sum(np.isfinite(reach))),
                         "load_start": float(np.median(loads)) if loads else None,
                         "mean_age": float(np.mean(ages))})
    return rows


def diverged_in(row: dict, diverged: dict) -> int:
    """The diverged runs (left out) of the arms behind one verdict row."""
    c, v, first, second = row["configuration"], row["variant"], *CONTRAST
    if row["quantity"] == "contrast":
        keys = [(c, first), (c, second), ("lockstep", second), (c, first, v), (c, second, v)]
    else:
        m = row["method"]
        keys = [(c, m), ("lockstep", m), (c, m, v), ("lockstep", m, "lockstep")]
    return sum(diverged[k] for k in keys)


def arm_rows(real: dict, sim: dict, diverged: dict, realised: dict, ages: dict, configs: list[dict],
             methods) -> list[dict]:
    """One row per arm behind the verdicts: per configuration and method the real runs (``variant`` real),
    then each simulated counterpart (``lockstep`` at the lockstep configuration); the runs, how many of
    them diverged (left out of the mean), the realised mean age of the consumed samples (``ages[(c, m)]``
    for the real runs' histogram, ``realised`` for the simulator's draws) and the mean and standard
    deviation of the area under the evaluation curve."""
    rows = []
    for c in configs:
        name = c["name"]
        for m in methods:
            variants = ["lockstep"] if c["family"] == "sync" else list(VARIANTS)
            for v, scores, bad, counts in ([("real", real[(name, m)], diverged[(name, m)], ages[(name, m)])]
                                           + [(v, sim[(name, m, v)], diverged[(name, m, v)],
                                               realised.get((name, m, v))) for v in variants]):
                x = np.asarray(scores, float)
                rows.append({"configuration": name, "layout": c["configuration"], "method": m, "variant": v,
                             "runs": int(x.size + bad), "diverged": int(bad), "mean_age": mean_age(counts),
                             "auc_mean": float(x.mean()) if x.size else float("nan"),
                             "auc_sd": float(x.std(ddof=1)) if x.size > 1 else float("nan")})
    return rows


def none_as_nan(rows: list[dict]) -> list[dict]:
    """``None`` as an empty cell (it reads back as NaN)."""
    return [{k: float("nan") if v is None else v for k, v in r.items()} for r in rows]

