"""Stage 1 of the step size x lag study: its protocol sections checked, the first study's runs it reuses,
and its rules on the committed rows of each surface (``vaco_jax.analysis.surfaces``, applied as
``kit_steplag.surface_rules`` applies them). The driver (``vaco_jax.studies.steplag``) plans its units
from :func:`surface_state` and writes :func:`stage1_rows` as ``choices.csv``.

A surface is a method's step knob on its grid x the surface's lag depths x the stage's seeds, on each
of its tasks; its rows are under ``results/steplag/surface/<task>/<surface>/`` (with the first study's
rows at identical settings when the reuse check holds).
"""

from __future__ import annotations

import os

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies.kit_steplag import STABILITY_REPS, surface_rules

FIRST = os.path.join("results", "locomotion")
CHECK = {"task": "Hopper-v4", "surface": "ppo_clip", "lag_depth": 8, "seed": 0, "value": 0.2}
SECTIONS = ("engine", "settings", "stage1", "budget")  # the protocol's sections every stage reads
STAGE1_FIELDS = ("seeds", "score", "surfaces", "normalisation")
SURFACE_FIELDS = ("method", "knob", "values", "tasks", "lag_depths")


def check(p: dict) -> None:
    """Every name and number of the sections stage 1 reads is valid, before anything is planned."""
    from vaco_jax.core.knobs import KNOBS, check_knob
    from vaco_jax.envs import env_source  # Brax's and Playground's registries imported only for other names

    missing = [k for k in SECTIONS if k not in p]
    if missing:
        raise ConfigError(f"protocol: missing section(s) {', '.join(missing)}; a protocol has {', '.join(SECTIONS)}")
    s1 = p["stage1"]
    if not isinstance(s1, dict) or not isinstance(s1.get("surfaces"), dict):
        raise ConfigError("protocol stage1.surfaces: missing, or not an object of surfaces")
    absent = [k for k in STAGE1_FIELDS if k not in s1]
    if absent:
        raise ConfigError(f"protocol stage1: missing {', '.join(absent)}")
    for key, s in s1["surfaces"].items():
        absent = [k for k in SURFACE_FIELDS if not isinstance(s, dict) or k not in s]
        if absent:
            raise ConfigError(f"protocol stage1.surfaces.{key}: missing {', '.join(absent)}")
        if s["knob"] not in KNOBS:
            import difflib
            near = difflib.get_close_matches(str(s["knob"]), list(KNOBS), n=1)
            raise ConfigError(f"protocol stage1.surfaces.{key}.knob: {s['knob']!r} is not a knob"
                              + (f" (did you mean {near[0]!r}?)" if near else "")
                              + f"; allowed values: {', '.join(sorted(KNOBS))}")
        for task in s["tasks"]:
            if env_source(task) is None:
                raise ConfigError(f"protocol stage1.surfaces.{key}.tasks: {task!r} is not valid")
            if not p["budget"]["rates_env_steps_per_s"].get(task):
                raise ConfigError(f"protocol budget.rates_env_steps_per_s: no rate for {task!r}")
        for v in s["values"]:
            check_knob(s["knob"], float(v))
        base_config(p, s["tasks"][0], key)  # the method and its options compose
        if len(s["values"]) < 5 or max(s["values"]) / min(s["values"]) < 30:
            raise ConfigError(f"protocol stage1.surfaces.{key}.values: at least 5 points spanning 30x")


def base_config(p: dict, task: str, key: str) -> Config:
    """The configuration of surface ``key``'s runs on ``task`` (its method and options, the protocol's settings)."""
    s = p["stage1"]["surfaces"][key]
    return Config(env=task, method=s["method"], backend=p["engine"]["backend"], **{
        k: tuple(v) if isinstance(v, list) else v for k, v in p["settings"].items()}, **s.get("options", {}))


def normalisation(p: dict, key: str) -> dict:
    """{task: (random, reference)} of a surface's tasks: the protocol's fixed floor and scale."""
    n = p["stage1"]["normalisation"]
    return {t: (n["random"][t], n["reference"][t]) for t in p["stage1"]["surfaces"][key]["tasks"]}


# ----------------------------------------------------------------------------- reuse of the first study

REUSED = ("ppo_clip", "ppo_kl", "spo", "vaco")


def reused_cells(p: dict, task: str, key: str) -> dict:
    """{(B, seed, value): the first study's row} for the surface's cells the first study ran with the same
    settings: B = 1-tuned value at every B, lag-aware value at B = 32, seeds of stage 1."""
    from vaco_jax.analysis import results
    if key not in REUSED or task not in ("Hopper-v4", "Walker2d-v4"):
        return {}
    tuned = results.read_json(os.path.join(FIRST, "tuned.json"))["chosen"][key]
    seeds = set(p["stage1"]["seeds"])
    out = {}
    for sub, value, lags in (("", tuned["1"]["value"], (1, 8, 32)),
                             ("variant=lag_aware", tuned["16"]["value"], (32,))):
        path = os.path.join(FIRST, "study", task, key, sub, "scores.csv")
        for r in results.read_table(path):
            if int(r["seed"]) in seeds and int(r["lag_depth"]) in lags:
                out[(int(r["lag_depth"]), int(r["seed"]), float(value))] = {**r, "value": float(value)}
    return out


def reuse_state(p: dict, results_dir: str) -> str:
    """'unknown' (the check has not run), 'holds' or 'fails'."""
    from vaco_jax.analysis import results
    path = os.path.join(results_dir, "check", CHECK["task"], CHECK["surface"], "scores.csv")
    if not os.path.exists(path):
        return "unknown"
    now = results.read_table(path)[0]
    then = reused_cells(p, CHECK["task"], CHECK["surface"])[(CHECK["lag_depth"], CHECK["seed"], CHECK["value"])]
    return "holds" if float(now["auc_eval_return"]) == float(then["auc_eval_return"]) else "fails"


# ----------------------------------------------------------------------------- the rules on a surface

def surface_rows(p: dict, results_dir: str, task: str, key: str, reuse: str, base_only: bool = False) -> list[dict]:
    """Every committed row of a surface on one task (its units and, when reuse holds, the first study's);
    ``base_only``: the stage's own seeds only (not the stability rule's added ones)."""
    from vaco_jax.analysis import results
    knob = p["stage1"]["surfaces"][key]["knob"]
    rows = []
    base = os.path.join(results_dir, "surface", task, key)
    for root, _, files in sorted(os.walk(base)) if os.path.isdir(base) else []:
        if "scores.csv" in files:
            rows += [{**r, "value": float(r[knob])} for r in results.read_table(os.path.join(root, "scores.csv"))]
    if reuse == "holds":
        rows += list(reused_cells(p, task, key).values())
    if base_only:
        rows = [r for r in rows if int(r["seed"]) in set(p["stage1"]["seeds"])]
    return rows


def surface_state(p: dict, results_dir: str, key: str, reuse: str) -> dict:
    """Stage 1's rules on one surface's committed rows (``kit_steplag.surface_rules``), computed once:
    ``every`` and ``base`` (the stage's own seeds) rows, ``state`` ("incomplete" or "complete"), the
    extension ``points`` the edge rule asks for (the values of an extension still short on some task,
    while one is), the extensions run (``extended``), the stability on the stage's own seeds
    (``base_stability``, None until it applies), the values that get the added seeds (``noisy``) and the
    tasks still lacking them (``lacking``), and the ``contest`` rows the lag-robust rule is applied to
    with their description."""
    s = p["stage1"]["surfaces"][key]
    every = [r for t in s["tasks"] for r in surface_rows(p, results_dir, t, key, reuse)]
    st = surface_rules(every, p["stage1"]["seeds"], s["tasks"], s["lag_depths"], s["values"], s["knob"],
                       p["stage1"]["score"], normalisation(p, key), STABILITY_REPS)
    return {"every": every, "base": st["base"], "state": "incomplete" if st["state"] == "incomplete" else "complete",
            "points": st["points"], "extended": st["extended"], "base_stability": st["stability"],
            "noisy": st["noisy"], "lacking": st["lacking"], "contest_rows": st["contest_rows"],
            "contest": st["contest"]}


def extensions_state(p: dict, results_dir: str, key: str, reuse: str) -> tuple[list, str]:
    """(the extension points the edge rule asks for, "incomplete" or "complete")."""
    st = surface_state(p, results_dir, key, reuse)
    return st["points"], st["state"]


def more_seeds(p: dict, results_dir: str, key: str, reuse: str) -> tuple[list[float], list[str]]:
    """(the values that get the stability rule's added seeds, the tasks still lacking them)."""
    st = surface_state(p, results_dir, key, reuse)
    return st["noisy"], st["lacking"]


def contest_rows(p: dict, results_dir: str, key: str, reuse: str) -> tuple[list[dict], str]:
    """The rows the lag-robust rule is applied to, and which contest they are: every value on the stage's
    seeds, or, once the stability rule's added seeds are in on every task, the values within noise on
    all their seeds (the rule and its stability computed once more, among them)."""
    st = surface_state(p, results_dir, key, reuse)
    return st["contest_rows"], st["contest"]


def _text(d: dict) -> str:
    return "; ".join(f"{k:g}: {v:.4g}" if isinstance(k, float) else f"{k}: {v:g}" for k, v in d.items()
                     if v is not None)


def stage1_rows(p: dict, results_dir: str) -> list[dict]:
    """One row per surface: its state and, where every task is in, stage 1's rules on its runs (the
    lag-robust setting, its stability and picks over the contest's rows, R per value on the stage's own
    seeds and in the contest, the per-lag optima, R restricted to Hopper-v4 at B in 1, 32 for the entry
    rule, and the values excluded)."""
    from vaco_jax.analysis import surfaces
    reuse = reuse_state(p, results_dir)
    s1 = p["stage1"]
    out = []
    for key, s in s1["surfaces"].items():
        st = surface_state(p, results_dir, key, reuse)
        every, base, rows = st["every"], st["base"], st["contest_rows"]
        row = {"surface": key, "method": s["method"], "knob": s["knob"], "runs": len(every),
               "tasks_in": " ".join(t for t in s["tasks"] if any(r["env"] == t for r in every))}
        if st["state"] != "complete":
            out.append({**row, "state": "incomplete"})
            continue
        norm = normalisation(p, key)
        choice = surfaces.robust_choice(rows, s1["score"], norm)
        stab = st["base_stability"] if rows is base and st["base_stability"] is not None \
            else surfaces.stability(rows, s1["score"], norm, reps=STABILITY_REPS)
        points, lacking = st["points"], st["lacking"]
        out.append({**row, "state": "extension pending" if points else "more seeds pending" if lacking else "complete",
                    "contest": st["contest"], "value": choice["value"], "stability": stab["share"],
                    "picks": _text(stab["picks"]), "R": _text(choice["R"]),
                    "R_stage_seeds": _text(surfaces.robust_choice(base, s1["score"], norm)["R"]),
                    "per_lag": "; ".join(f"B={b}: " + ("every value equal" if v is None else f"{v:g}")
                                         for b, v in surfaces.per_lag_optima(base, s1["score"], norm).items()),
                    "R_H": hopper_r(rows, s1["score"], norm).get(choice["value"]),
                    "excluded": "; ".join(f"{v:g}: {' '.join(x)}" for v, x in choice["excluded"].items()),
                    "pending": " ".join(f"{v:g}" for v in points) if points else " ".join(lacking) if lacking else ""})
    return out


def hopper_r(rows: list[dict], score: str, norm: dict) -> dict:
    """R restricted to Hopper-v4 at B in {1, 32} (the part every surface has): stage 2's entry rule."""
    from vaco_jax.analysis import surfaces
    part = [r for r in rows if r["env"] == "Hopper-v4" and int(r["lag_depth"]) in (1, 32)]
    return surfaces.robust_choice(part, score, {"Hopper-v4": norm["Hopper-v4"]})["R"] if part else {}
