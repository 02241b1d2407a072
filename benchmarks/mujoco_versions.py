"""The physics cost of one MuJoCo version against another on Gymnasium's models, one thread.

    pip install --no-deps --target /tmp/mujoco-3.6.0 mujoco==3.6.0
    python -m benchmarks.mujoco_versions --other /tmp/mujoco-3.6.0 --tasks Hopper-v4 Walker2d-v4

Why: the C engine's step is MuJoCo's ``mj_step`` (about 94% of a step of 256 Hopper envs) plus the
program's own work, and a comparison with another simulator (EnvPool bundles its own MuJoCo) compares
MuJoCo versions as much as engines. This times ``mj_step`` alone, in a child process per version: the
project's installed mujoco, and the package found in ``--other`` (put first on the child's path).

Both children step the same seeded trajectory: the task's reset (``reset_state`` on the model's initial
state), uniform random actions in the control range, ``frame_skip`` substeps, a reset when the task's
health rule ends the episode (the time limit is left out: it only adds resets). Only the ``mj_step``
calls are timed. Each round runs both versions once per task, in alternating order; the report gives
each round's env steps/s and the median ratio other / installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


@dataclasses.dataclass
class Args:
    other: str = ""  # a directory holding another mujoco package (pip install --no-deps --target DIR mujoco==X)
    tasks: tuple[str, ...] = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4")  # Gymnasium tasks
    steps: int = 20_000  # env steps timed per child
    rounds: int = 3  # rounds; each runs both versions once per task, in alternating order
    child: str = ""  # (internal) time this task in this process and print one JSON line


def time_task(name: str, steps: int, seed: int = 0) -> dict:
    """Env steps per second of ``mj_step`` alone on the task's model, one thread, this process's mujoco."""
    import mujoco

    from vaco_jax.envs.gymnasium_tasks import GYM_TASKS, model_path

    task = GYM_TASKS[name]
    model = mujoco.MjModel.from_xml_path(model_path(task))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(seed)
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    n_u = task.uniforms_per_reset(model.nq, model.nv)
    init_qvel = np.zeros(model.nv)

    def reset():
        mujoco.mj_resetData(model, data)
        qpos, qvel = task.reset_state(np, rng.uniform(size=n_u), model.qpos0.copy(), init_qvel)
        data.qpos[:], data.qvel[:] = qpos, qvel
        mujoco.mj_forward(model, data)

    reset()
    physics, resets = 0.0, 0
    for _ in range(steps):
        data.ctrl[:] = rng.uniform(low, high)
        t = time.perf_counter()
        mujoco.mj_step(model, data, task.frame_skip)
        physics += time.perf_counter() - t
        if task.terminated(np, {"qpos": data.qpos[None], "qvel": data.qvel[None]})[0]:
            reset()
            resets += 1
    return {"mujoco": mujoco.__version__, "task": name, "rate": steps / physics, "resets": resets}


def _run_child(task: str, steps: int, path: str | None) -> dict:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-m", "benchmarks.mujoco_versions", "--child", task, "--steps", str(steps)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(args: Args) -> dict:
    if args.child:
        print(json.dumps(time_task(args.child, args.steps)))
        return {}
    if not args.other or not os.path.isdir(os.path.join(args.other, "mujoco")):
        raise SystemExit(f"other={args.other!r} must be a directory holding a mujoco package "
                         "(pip install --no-deps --target DIR mujoco==VERSION)")
    from vaco_jax.envs.gymnasium_tasks import GYM_TASKS

    for task in args.tasks:
        if task not in GYM_TASKS:
            raise SystemExit(f"tasks: {task!r} is not one of {sorted(GYM_TASKS)}")
    rates: dict[tuple[str, str], list[float]] = {}
    versions = {}
    for r in range(args.rounds):
        line = []
        for task in args.tasks:
            order = [("installed", None), ("other", args.other)]
            if r % 2:
                order.reverse()
            for which, path in order:
                res = _run_child(task, args.steps, path)
                versions[which] = res["mujoco"]
                rates.setdefault((which, task), []).append(res["rate"])
                line.append(f"{which} {task} {res['rate']:,.0f}")
        print(f"round {r + 1}: " + ", ".join(line), flush=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"mj_step alone, one thread, env steps/s, median of {args.rounds} rounds ({stamp}); "
          f"installed mujoco {versions['installed']}, other {versions['other']}:")
    ratios = {}
    for task in args.tasks:
        for which in ("installed", "other"):
            v = rates[(which, task)]
            print(f"  mujoco {versions[which]:<8} {task:<16} {statistics.median(v):>9,.0f}   rounds: "
                  + ", ".join(f"{x:,.0f}" for x in v))
        per_round = [o / i for o, i in zip(rates[("other", task)], rates[("installed", task)])]
        ratios[task] = statistics.median(per_round)
        print(f"  {versions['other']} / {versions['installed']}, {task}: {ratios[task]:.3f}   rounds: "
              + ", ".join(f"{x:.3f}" for x in per_round))
    return {"versions": versions, "ratios": ratios,
            "rates": {f"{w} {t}": v for (w, t), v in rates.items()}}


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
