"""Claim 3b's per-phase cost for the pendulum-suite study (``vaco_jax.studies.study``, stage ``cost``).

The learner's milliseconds per phase (align + E x M gradient steps on one fixed lagged batch, at a
design's largest lag depth and the frozen step sizes) of the design's methods, timed in interleaved
rounds (the methods' order alternating), each round the median of a number of calls per method. A
chunk's wall time (curves' ``seconds``) is mostly env stepping and evaluation, which the methods share,
so it cannot resolve a difference of one forward pass per phase; this measures the part the methods
differ in, with the diagnostic TV to π_T switched off (``UpdateShape.learner_diagnostics``), so that each
method computes π_T only if it reads it (decoupled PPO's proximal policy is π_T; A-3PO's is not).
A finished table is kept: delete it to measure again.
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.core.config import ConfigError


def interleaved_costs(calls: dict, rounds: int, per_round: int, clock=None) -> list[dict]:
    """Time each task's methods in ``rounds`` interleaved rounds.

    ``calls``: {(task, method): zero-argument call}. Task by task: in each of its rounds the task's
    methods are timed one after another, the order reversed every other round (so drifting load
    falls on both alike); a method's value for the round is the median of ``per_round`` calls.
    Rows: env, method, round, learner_ms."""
    import statistics
    import time

    clock = clock or time.perf_counter
    by_task: dict[str, list] = {}
    for (task, method), call in calls.items():
        by_task.setdefault(task, []).append((method, call))
    rows = []
    for task, methods in by_task.items():
        for r in range(rounds):
            for method, call in (methods if r % 2 == 0 else methods[::-1]):
                times = []
                for _ in range(per_round):
                    t0 = clock()
                    call()
                    times.append(clock() - t0)
                rows.append({"env": task, "method": method, "round": r,
                             "learner_ms": 1e3 * statistics.median(times)})
    return rows


def committed(path: str, design: str, lag_depth: int) -> tuple[list[dict], dict]:
    """The table at ``path`` and the record beside it (``.json``: where and how each task was measured),
    or ([], a new record) when the table does not exist (a deleted table starts a new record). Damaged
    files, or a table timed at another lag depth than the design's, are errors here, before anything is
    compiled or timed."""
    from vaco_jax.analysis import results

    meta_path = path[:-len(".csv")] + ".json"
    fresh_meta = {"what": "learner milliseconds per phase (align + E x M gradient steps on one fixed lagged batch; "
                          "the TV-to-pi_T diagnostic off, so pi_T is computed only by a method that reads it)",
                  "design": design, "measurements": []}
    if not os.path.exists(path):
        return [], fresh_meta
    old = results.read_table(path)
    meta = results.read_json(meta_path) if os.path.exists(meta_path) else fresh_meta
    depths = sorted({int(r["lag_depth"]) for r in old})
    if depths != [lag_depth]:
        raise ConfigError(f"{path}: measured at lag depth {depths}, the design's is {lag_depth}; "
                          "delete it to measure again")
    return old, meta


def measure(path: str, meta: dict, old: list[dict], groups: list, lag_depth: int, rounds: int,
            per_round: int) -> None:
    """Compile each group's learner call at ``lag_depth``, time them (:func:`interleaved_costs`), and
    write the record (first: rows are never without the record of where they were timed), then the
    table: ``old`` rows kept, the new ones added."""
    import time

    import jax

    from vaco_jax.analysis import results
    from vaco_jax.core.config import make_traced
    from vaco_jax.driver import provenance
    from vaco_jax.driver.program import learner_call

    calls = {}
    for g in groups:
        print(f"cost: compiling {g.config.env}/{g.config.method} at B={lag_depth}", flush=True)
        warm = -(-lag_depth // g.config.phases_per_chunk)  # enough phases for every lag up to the depth
        calls[(g.config.env, g.config.method)] = learner_call(g.config, lag_depth, make_traced(g.config, lag_depth),
                                                              warm_chunks=warm, learner_diagnostics=False)[0]
    t0 = time.time()
    rows = [{**r, "lag_depth": lag_depth} for r in interleaved_costs(calls, rounds, per_round)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    where = provenance.machine()
    meta["measurements"].append({
        "tasks": sorted({r["env"] for r in rows}), "lag_depth": lag_depth, "rounds": rounds,
        "calls_per_round": per_round, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "seconds": round(time.time() - t0, 1), "cpu": where["cpu"], "cpu_count": where["cores"], "jax": jax.__version__,
        "device": str(jax.devices()[0])})
    results.write_json(path[:-len(".csv")] + ".json", meta)
    results.write_table(path, old + rows)
    for task in sorted({r["env"] for r in rows}):
        means = {m: np.mean([r["learner_ms"] for r in rows if r["env"] == task and r["method"] == m])
                 for m in sorted({r["method"] for r in rows if r["env"] == task})}
        print(f"cost {task}: " + ", ".join(f"{m} {v:.2f} ms" for m, v in means.items()))
