"""The locomotion study's tuning rule (``vaco_jax.studies.locomotion``): each method's step-size knob
chosen at each tuning lag depth from its grid (the protocol's ``tuning`` section), an optimum at an edge
of the grid first asking for one point beyond it, the choices frozen in ``tuned.json`` once final."""

from __future__ import annotations

import os

from vaco_jax.core.config import ConfigError


def _tuning_rows(tuning_dir: str, p: dict, method: str) -> list[dict]:
    from vaco_jax.analysis import results
    rows = []
    base = os.path.join(tuning_dir, p["tuning"]["task"], method)
    for sub in [base] + sorted(os.path.join(base, d) for d in (os.listdir(base) if os.path.isdir(base) else [])
                               if d.startswith("extend_B")):
        path = os.path.join(sub, "scores.csv")
        if os.path.exists(path):
            rows += results.read_table(path)
    return rows


def choose(rows: list[dict], knob: str, b: int, score: str) -> dict:
    """The grid point with the highest mean ``score`` over seeds at lag depth ``b``; points with a
    diverged run are never chosen. Returns the value and every point's numbers."""
    import numpy as np

    from vaco_jax.analysis.tables import is_diverged

    points: dict[float, list] = {}
    for r in rows:
        if int(r["lag_depth"]) == b:
            points.setdefault(float(r[knob]), []).append(r)
    table = []
    for value, rs in sorted(points.items()):
        s = [float(r[score]) for r in rs]
        table.append({"value": value, "mean": float(np.mean(s)), "runs": len(rs),
                      "diverged": int(sum(is_diverged(r) for r in rs))})
    ok = [t for t in table if t["diverged"] == 0 and np.isfinite(t["mean"])]
    if not ok:
        raise ConfigError(f"tuning {knob} at B={b}: every grid point has a diverged run or no score")
    best = max(ok, key=lambda t: t["mean"])
    return {"value": best["value"], "grid": table}


def freeze(p: dict, tuning_dir: str, path: str, digest: str) -> dict:
    """Choose every (method, tuning lag depth); an optimum at an edge asks for one extension first.
    The file is written once every choice is final and never changed afterwards."""
    from vaco_jax.analysis import results
    t = p["tuning"]
    out = {"protocol_sha256": digest, "rule": t["rule"], "edge_rule": t["edge_rule"], "chosen": {}, "extend": {},
           "at_edge_after_extension": []}
    for m in p["methods"]:
        knob, values = t["grids"][m]["knob"], [float(v) for v in t["grids"][m]["values"]]
        rows = _tuning_rows(tuning_dir, p, m)
        for b in (int(x) for x in t["lag_depths"]):
            pick = choose(rows, knob, b, t["score"])
            tried = sorted(x["value"] for x in pick["grid"])
            extended = len(tried) > len(values)
            if not extended and pick["value"] in (values[0], values[-1]):
                edge, neighbour = (values[0], values[1]) if pick["value"] == values[0] else (values[-1], values[-2])
                out["extend"].setdefault(m, {})[str(b)] = float(f"{edge * edge / neighbour:.4g}")
            elif extended and pick["value"] in (tried[0], tried[-1]):
                out["at_edge_after_extension"].append(f"{m} B={b}")
            out["chosen"].setdefault(m, {})[str(b)] = {"knob": knob, **pick}
    if not out["extend"]:
        results.write_json(path, out)
    return out
