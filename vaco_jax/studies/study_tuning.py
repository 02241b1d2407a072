"""The pendulum-suite study's tuning rule (``vaco_jax.studies.study``, stage ``tune``): each (task, method)'s
learning rate and step-size knob chosen from its tuning grid, frozen in ``OUT/tuned.json`` and never
changed afterwards; the study's designs read their step sizes from it (:func:`tuned`)."""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.core.config import Config, ConfigError


def knob_default(config: Config, name: str) -> float:
    """The value a method uses for a knob it reads: the config's, else its piece's default."""
    value = getattr(config, name, None)
    if value is not None:
        return float(value)
    method = config.build_method()
    for piece in (method.advantage, method.proximal, method.surrogate, method.sample_filter):
        if hasattr(piece, name):
            return float(getattr(piece, name))
    raise ConfigError(f"{name}: method {config.method!r} does not read it")


def choose(rows: list[dict], knob: str | None) -> dict:
    """The tuned pair from one (task, method)'s tuning rows: highest mean AUC over the tuning seeds,
    pairs with a diverged run excluded. Returns the choice and every pair's numbers."""
    from vaco_jax.analysis.tables import is_diverged

    keys = ["learning_rate"] + ([knob] if knob else [])
    pairs: dict[tuple, list[dict]] = {}
    for r in rows:
        pairs.setdefault(tuple(float(r[k]) for k in keys), []).append(r)
    table = []
    for pair, rs in sorted(pairs.items()):
        auc = [float(r["auc_eval_return"]) for r in rs]
        final = [float(r["final_eval_return"]) for r in rs]
        diverged = sum(is_diverged(r) for r in rs)
        table.append({**dict(zip(keys, pair)), "mean_auc": float(np.mean(auc)), "mean_final": float(np.mean(final)),
                      "runs": len(rs), "diverged": diverged})
    ok = [t for t in table if t["diverged"] == 0 and np.isfinite(t["mean_auc"])]
    if not ok:
        raise ConfigError("every tuning pair diverged or has no score; widen the grid (LEARNING_RATES, KNOB_FACTORS)")
    best = max(ok, key=lambda t: t["mean_auc"])
    return {"chosen": {k: best[k] for k in keys}, "grid": table}


def check_grid(path: str, frozen: dict, learning_rates) -> None:
    """A tuning directory holds one grid: other learning rates belong in another ``--out``."""
    grid = frozen.get("learning_rates")
    if grid is not None and [float(x) for x in grid] != [float(x) for x in learning_rates]:
        raise ConfigError(f"learning_rates: {list(learning_rates)} differs from {frozen['learning_rates']}, the grid "
                          f"{path} was tuned with; a wider grid is a new tuning directory (choose another --out)")


def tuned_path(out: str) -> str:
    return os.path.join(out, "tuned.json")


def freeze(out: str, groups, step_knob: dict, learning_rates, tuning_seeds, knob_factors) -> dict:
    """Choose and freeze every tuned (task, method) of ``groups`` in ``OUT/tuned.json``; a frozen
    choice is never changed (a different choice from the same rows is an error: the rows changed).
    ``step_knob``: each method's step-size knob; the grid's learning rates, seeds and knob factors are
    recorded in a new file."""
    from vaco_jax.analysis import results
    from vaco_jax.driver import provenance
    path = tuned_path(out)
    os.makedirs(out, exist_ok=True)
    # processes tuning other --methods may freeze at the same moment: one read-modify-write at a time
    with provenance.directory_lock(out):
        frozen = results.read_json(path) if os.path.exists(path) else {
            "criterion": "max mean auc_eval_return over the tuning seeds, no diverged run",
            "tuning_seeds": list(tuning_seeds), "learning_rates": [float(x) for x in learning_rates],
            "knob_factors": list(knob_factors), "chosen": {}}
        check_grid(path, frozen, learning_rates)
        rows = results.load_scores(os.path.join(out, "tuning"))
        for g in groups:
            task, method = g.config.env, g.config.method
            pick = choose([r for r in rows if r["env"] == task and r["method"] == method], step_knob[method])
            old = frozen["chosen"].get(task, {}).get(method)
            if old is not None and old["chosen"] != pick["chosen"]:
                raise ConfigError(f"{path}: {task}/{method} was frozen at {old['chosen']}, the tuning rows now "
                                  f"give {pick['chosen']}; the tuning results changed (restore them or choose "
                                  "another --out)")
            frozen["chosen"].setdefault(task, {})[method] = pick
        results.write_json(path, frozen)
    return frozen


def tuned(out: str, task: str, method: str) -> dict:
    from vaco_jax.analysis import results
    path = tuned_path(out)
    chosen = results.read_json(path)["chosen"] if os.path.exists(path) else {}
    if method not in chosen.get(task, {}):
        raise ConfigError(f"{task}/{method} has no frozen step size in {path}; run first: python "
                          f"experiments/study.py tune --out {out} --tasks {task}")
    return chosen[task][method]["chosen"]
