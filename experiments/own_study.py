"""Your own study in one file: a question, its arms, lag depths, seeds and rule, fixed in a protocol before the
first run, run in units by the study kit and reported only under that protocol (docs/studies.md).

    python experiments/own_study.py plan                 # fixes OUT/results/protocol.json (once), lists the units
    python experiments/own_study.py run --minutes 5      # the next units that fit in 5 minutes
    python experiments/own_study.py report               # the rule at every lag depth -> verdicts.csv

By default a tiny study of the pure-JAX point_mass task (seconds); --task, --steps, --seeds size a new protocol
(`plan --task Hopper-v4 --steps 1000000 --seeds 0 1 2 3 4 --out mine`), then the study: differing flags are refused.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from vaco_jax import Config, ConfigError, read_table, write_table
from vaco_jax.analysis import rules
from vaco_jax.driver import grid
from vaco_jax.driver.cli import cli_main, parse_args
from vaco_jax.studies import kit

def new_protocol(task: str, steps: int, seeds: list[int]) -> dict:
    tiny = {"num_envs": 8, "unroll_length": 16, "num_epochs": 2, "num_minibatches": 2, "num_evals": 2,
            "eval_episodes": 2, "episode_length": 32, "policy_hidden": [8], "value_hidden": [8]}
    return {"question": "At each lag depth, does VACO beat PPO-Clip by more than the margin (P(A > B) > 1/2 + margin)?",
            "task": task, "total_env_steps": steps, "seeds": seeds, "lag_depths": [1, 4],
            "arms": {"vaco": {"method": "vaco"}, "ppo_clip": {"method": "ppo_clip", "clip_epsilon": 0.2}},
            "settings": tiny if task == "point_mass" else {},  # Config fields every arm shares
            "rule": {"a": "vaco", "b": "ppo_clip", "score": "auc_eval_return", "margin": 0.1, "reps": 2000, "seed": 0},
            "rate_env_steps_per_s": 2000}  # this machine's training rate on the task: measure it before the first run

HELP_DEFAULTS = {"task": "point_mass", "steps": "256", "seeds": "0 1 2"}  # --help: what a new protocol takes


@dataclasses.dataclass
class Args(kit.RunArgs):
    out: str = os.path.join("runs", "own_study")  # OUT/results: protocol, manifest, tables; OUT/runs: run dirs
    task: str | None = None  # a new protocol's task
    steps: int | None = None  # a new protocol's env steps per run
    seeds: tuple[int, ...] | None = None  # a new protocol's seeds
    results = property(lambda self: os.path.join(self.out, "results"))
    runs = property(lambda self: os.path.join(self.out, "runs"))
    protocol = property(lambda self: os.path.join(self.out, "results", "protocol.json"))


def study_units(p: dict) -> list[kit.Unit]:
    """One unit per arm: its lag depths x seeds, one compiled group (every setting checked by its Config)."""
    r = p["rule"]
    if not ({r["a"], r["b"]} <= set(p["arms"]) and 0 <= r["margin"] < 0.5):
        raise ConfigError(f"protocol rule: arms {r['a']!r}, {r['b']!r}, margin {r['margin']!r} not valid; allowed "
                          f"values: two of the arms ({', '.join(p['arms'])}), 0 <= margin < 0.5")
    shared, out = {k: tuple(v) if isinstance(v, list) else v for k, v in p["settings"].items()}, []
    for name, arm in p["arms"].items():
        config = Config.for_task(p["task"], total_env_steps=p["total_env_steps"],
                                 **{"buffer_capacity": max(p["lag_depths"]), **shared, **arm})
        cells = tuple(grid.grid(p["lag_depths"], p["seeds"]))
        out.append(kit.Unit(name, "study", grid.Group(config, cells, name, name), len(cells),
                            len(cells) * p["total_env_steps"] / p["rate_env_steps_per_s"] / 60.0))
    return out


def unit_dir(name: str) -> str:
    return os.path.join("study", name)


def report(p: dict, args: Args) -> list[dict]:
    """The rule at every lag depth, from every unit's committed scores (diverged runs left out, counted)."""
    r, listed = p["rule"], {m["unit"] for m in kit.manifest(args.results)}
    if lost := [u.name for u in study_units(p) if u.name not in listed]:
        raise ConfigError(f"report: units {lost} have not finished; the rule reads every unit (run them first)")
    scores = {arm: read_table(os.path.join(args.results, unit_dir(arm), "scores.csv")) for arm in (r["a"], r["b"])}
    rows = []
    for b in p["lag_depths"]:
        kept = {arm: np.array([[s[r["score"]]] for s in scores[arm] if s["lag_depth"] == b and not s["diverged"]
                               and np.isfinite(s[r["score"]])]) for arm in scores}
        h = rules.head_to_head(kept[r["a"]], kept[r["b"]], r["reps"], r["seed"])
        rows.append({"lag_depth": b, "a": r["a"], "b": r["b"], "runs_a": len(kept[r["a"]]), "runs_b": len(kept[r["b"]]),
                     "p_a_beats_b": h["point"], "low": h["low"], "high": h["high"], "threshold": 0.5 + r["margin"],
                     "verdict": rules.verdict(h["low"], h["high"], 0.5 + r["margin"])})
    write_table(os.path.join(args.results, "verdicts.csv"), rows)
    print(p["question"], f"{'B':>4}  P({r['a']} > {r['b']}) [95% interval]  runs  verdict (P > {0.5 + r['margin']:g})",
          *(f"{v['lag_depth']:>4}  {v['p_a_beats_b']:.3f} [{v['low']:.3f}, {v['high']:.3f}]  "
            f"{v['runs_a']}/{v['runs_b']}  {v['verdict']}" for v in rows), sep="\n")
    return rows


def main(args: Args):
    if not os.path.exists(args.protocol) and (args.stage == "plan" or args.stage == "run" and not args.dry_run):
        p = new_protocol(args.task or "point_mass", args.steps or 256, list(args.seeds or (0, 1, 2)))
        kit.check_protocol_file(study_units, p, args.protocol)  # checked, then fixed (and hashed) before any run
        kit.write_protocol(args.protocol, p)
    p, digest = kit.load_protocol(args.protocol)
    kit.check_protocol_file(study_units, p, args.protocol)
    asked = {"task": args.task, "total_env_steps": args.steps, "seeds": list(args.seeds) if args.seeds else None}
    if differ := [k for k, v in asked.items() if v is not None and v != p.get(k)]:
        raise ConfigError(f"{', '.join(differ)}: {args.protocol} is fixed with other values; edit it and record "
                          "--deviation, or start a new study with another --out")
    kit.check_dry_run(args)
    if args.stage == "report":  # only under the units' protocol, from every listed unit's tables
        kit.check_report_protocol(args.results, digest, args.protocol)
        kit.check_units_present(args.results, args.runs, unit_dir)
        return report(p, args)
    if args.stage == "plan" or args.dry_run:  # run checks them in start_run, then copies back what it can
        kit.check_units_present(args.results, args.runs, unit_dir, copy_back=args.stage == "run")
    units = study_units(p)
    if args.stage == "plan":
        print(f"protocol {args.protocol} sha256 {digest}\n{p['question']}", *(
            f"{u.name:<16}{u.runs:>5} runs  ~{u.minutes:.1f} min  {kit.status(args, u)}" for u in units), sep="\n")
        return []
    kit.check_minutes(args)
    spec = lambda u: {"study": "own_study", "unit": u.name, "protocol_sha256": digest}  # noqa: E731
    return (kit.dry_run_units(units, digest, args) if args.dry_run
            else kit.run_units(lambda: study_units(p), args, digest, unit_dir, spec, units=units))


if __name__ == "__main__":
    cli_main(main, parse_args(Args))
