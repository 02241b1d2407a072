"""The lag-shape study's ``tuning`` part (``results/lagshape/``): PPO-Clip's and VACO's surfaces under fixed
lag, judged by the step size x lag study's stage-1 rules word for word (protocol ``tuning``: its
``robust_rule``, ``extension_rule`` and ``stability`` are stage 1's), applied by the same code
(``kit_steplag.surface_rules``, ``analysis.surfaces``) on stage 1's normalisation (the step size x lag
protocol's ``stage1.normalisation``).

What the rules ask for next are units: a point beyond an edge (``tuning/<task>/<surface>/ext-<value>``, every
task, B and seed of the surface) and the stability rule's added seeds (``tuning/<task>/<surface>/seeds3-5``,
the values within noise). Once ``tuning_choices.csv`` (written by ``report``) says every surface is decided,
the ``study`` part's confirmatory units follow at the chosen settings (:func:`chosen`).
"""

from __future__ import annotations

import json
import os

from vaco_jax.core.config import ConfigError
from vaco_jax.studies.kit_steplag import MORE_SEEDS, STABILITY_REPS, surface_rules

CHOICES = "tuning_choices.csv"  # one row per surface: its state, the lag-robust setting, its stability
SURFACES = "tuning_surfaces.csv"  # the normalised score per surface, task (or pooled), B and value
SCORE = "auc_eval_return"  # stage 1's score (the step size x lag protocol's stage1.score)
MORE = f"seeds{MORE_SEEDS[0]}-{MORE_SEEDS[-1]}"  # the added seeds' unit suffix
_RULES_SEEN: dict[str, dict] = {}  # surface_state's rules by their inputs (a command's lifetime)


def stage1_norm(steplag: str, tasks) -> dict:
    """``{task: (random, reference)}``: stage 1's fixed numbers from the step size x lag protocol."""
    from vaco_jax.studies import kit
    n = kit.load_protocol(os.path.join(steplag, "protocol.json"))[0]["stage1"]["normalisation"]
    missing = [t for t in tasks if t not in n["random"] or t not in n["reference"]]
    if missing:
        raise ConfigError(f"steplag: {steplag}/protocol.json's stage1.normalisation has no numbers for {missing}")
    return {t: (float(n["random"][t]), float(n["reference"][t])) for t in tasks}


def check(p: dict) -> None:
    """The protocol's stability numbers are the ones ``analysis.surfaces`` applies (stage 1's)."""
    from vaco_jax.analysis import surfaces
    st = p["tuning"]["stability"]
    if float(st["threshold"]) != surfaces.STABILITY_THRESHOLD:
        raise ConfigError(f"tuning.stability.threshold: {st['threshold']!r}; allowed values: "
                          f"{surfaces.STABILITY_THRESHOLD} (stage 1's rule, which the part applies)")
    if set(p["tuning"]["seeds"]) & set(MORE_SEEDS):
        raise ConfigError(f"tuning.seeds: {p['tuning']['seeds']} overlaps the added seeds {list(MORE_SEEDS)}")


def surface_state(p: dict, results_dir: str, steplag: str, key: str) -> tuple[list[dict], dict]:
    """(every committed row of surface ``key``: its units' and its extensions' and added seeds', each with
    its knob's ``value``; ``surface_rules`` on them)."""
    from vaco_jax.analysis import results
    c = p["tuning"]
    s = c["surfaces"][key]
    every = [{**r, "value": float(r[s["knob"]])} for t in c["tasks"]
             for r in results.placed_rows(os.path.join(results_dir, "tuning", t, key), ())]
    norm = stage1_norm(steplag, c["tasks"])
    # the rules (the stability's 2,000 resamples, ~2 s a surface) run once per process for the same rows:
    # `run` asks for the units at every round, `report` for the units and then the choices (the result is
    # read, never changed, by its callers)
    memo = json.dumps([every, c["seeds"], c["tasks"], c["lag_depths"], s["values"], s["knob"], norm,
                       STABILITY_REPS], sort_keys=True, default=str)
    if memo not in _RULES_SEEN:
        _RULES_SEEN[memo] = surface_rules(every, c["seeds"], c["tasks"], c["lag_depths"], s["values"], s["knob"],
                                          SCORE, norm, STABILITY_REPS)
    return every, _RULES_SEEN[memo]


def extra_units(p: dict, results_dir: str, steplag: str) -> list[tuple[str, str, str, list]]:
    """``(task, surface, suffix, cells)`` of every unit the rules have asked for so far (run or not):
    each extension point at every task, B and seed; the added seeds on the values within noise."""
    from vaco_jax.driver import grid
    c, out = p["tuning"], []
    for key, s in c["surfaces"].items():
        st = surface_state(p, results_dir, steplag, key)[1]
        for v in sorted(set(st["extended"]) | set(st["points"])):
            out += [(t, key, f"ext-{v:g}", grid.grid(c["lag_depths"], c["seeds"], **{s["knob"]: [v]}))
                    for t in c["tasks"]]
        if st["noisy"]:
            out += [(t, key, MORE, grid.grid(c["lag_depths"], MORE_SEEDS, **{s["knob"]: list(st["noisy"])}))
                    for t in c["tasks"]]
    return out


def _text(d: dict) -> str:
    return "; ".join(f"{k:g}: {v:.4g}" for k, v in d.items() if v is not None)


def choices(p: dict, results_dir: str, steplag: str) -> tuple[list[dict], list[dict]]:
    """(``tuning_choices.csv``: a row per surface, as stage 1's ``choices.csv``; ``tuning_surfaces.csv``).
    A surface's ``state``: incomplete, extension pending, more seeds pending (``pending`` names the units
    to run) or complete; the lag-robust setting and its stability are reported whenever its grid is in."""
    from vaco_jax.analysis import surfaces
    c = p["tuning"]
    norm = stage1_norm(steplag, c["tasks"])
    out, table = [], []
    for key, s in c["surfaces"].items():
        every, st = surface_state(p, results_dir, steplag, key)
        row = {"surface": key, "method": s["method"], "knob": s["knob"], "lag_model": c["lag_model"],
               "runs": len(every)}
        if st["state"] == "incomplete":
            out.append({**row, "state": "incomplete"})
            continue
        rows = st["contest_rows"]
        choice = surfaces.robust_choice(rows, SCORE, norm)
        # the stability on the stage's own seeds when the contest is theirs, else recomputed once among the
        # values within noise on all their seeds (stability.more_seeds)
        stab = st["stability"] if rows is st["base"] and st["stability"] is not None \
            else surfaces.stability(rows, SCORE, norm, reps=STABILITY_REPS)
        points, lacking = st["points"], st["lacking"]
        pending = ([f"tuning/{t}/{key}/ext-{v:g}" for v in points for t in c["tasks"]] if points else
                   [f"tuning/{t}/{key}/{MORE}" for t in lacking])
        out.append({**row, "state": "extension pending" if points else "more seeds pending" if lacking else "complete",
                    "contest": st["contest"], "value": choice["value"], "stability": stab["share"],
                    "stable": stab["stable"], "picks": _text(stab["picks"]), "R": _text(choice["R"]),
                    "R_stage_seeds": _text(surfaces.robust_choice(st["base"], SCORE, norm)["R"]),
                    "per_lag": "; ".join(f"B={b}: " + ("every value equal" if v is None else f"{v:g}")
                                         for b, v in surfaces.per_lag_optima(st["base"], SCORE, norm).items()),
                    "extended": " ".join(f"{v:g}" for v in st["extended"]),
                    "excluded": "; ".join(f"{v:g}: {' '.join(x)}" for v, x in choice["excluded"].items()),
                    "pending": " ".join(pending)})
        for (panel, b), points_ in sorted(surfaces.surface_curves(every, SCORE, norm).items()):
            table += [{"surface": key, "panel": panel, "lag_model": c["lag_model"], "lag_depth": b, "value": v,
                       "mean_s": m, "min_s": lo, "max_s": hi} for v, m, lo, hi in points_]
    return out, table


def tables(p: dict, results_dir: str, steplag: str) -> dict:
    """``{tuning_choices.csv: rows, tuning_surfaces.csv: rows}`` (:func:`choices`)."""
    out = choices(p, results_dir, steplag)
    return {CHOICES: out[0], SURFACES: out[1]}


def chosen(p: dict, results_dir: str) -> dict | None:
    """``{surface: its lag-robust value}`` once ``tuning_choices.csv`` says every surface is complete with a
    value; else None (the study's units wait)."""
    from vaco_jax.analysis import results
    path = os.path.join(results_dir, CHOICES)
    if not os.path.exists(path):
        return None
    rows = {r["surface"]: r for r in results.read_table(path)}
    if set(rows) != set(p["tuning"]["surfaces"]) or any(
            r["state"] != "complete" or str(r.get("value", "")) in ("", "nan", "None") for r in rows.values()):
        return None
    return {k: float(r["value"]) for k, r in rows.items()}
