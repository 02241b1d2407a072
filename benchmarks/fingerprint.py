"""Fingerprints of final parameters and scores, to show a refactor changed no number.

Runs a few small groups through the one training loop (``runner.run_group``) — methods and lag
models of every kind, a group split over the devices, a C-engine task — and a single run
(``vaco-train``'s path), and writes, per case, a sha256 of the saved policies (``policies.npz``) and of
the score rows. Run it before and after a change on the same machine and compare:

    python -m benchmarks.fingerprint runs/fp_before.json
    python -m benchmarks.fingerprint runs/fp_after.json --compare runs/fp_before.json

Exit code 1 when any case differs; score columns added since the earlier file (a new diagnostic)
are listed, not counted as a difference, when every earlier column is unchanged. Fingerprints are
machine-specific (floating point differs across CPU types), so only files from one machine are compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vaco_jax.core.config import Config  # noqa: E402
from vaco_jax.driver import grid, runner  # noqa: E402
from vaco_jax.driver.train import run  # noqa: E402


def _tiny(**settings) -> Config:
    base = dict(env="point_mass", num_envs=8, unroll_length=16, total_env_steps=8 * 16 * 6, num_evals=3,
                eval_episodes=2, episode_length=50, num_epochs=2, num_minibatches=2, buffer_capacity=8)
    return Config(**{**base, **settings})


# name -> (config, cells as (lag depth, seed))
CASES = {
    "vaco_uniform_sharded": (_tiny(method="vaco"), [(1, 0), (4, 1), (8, 2)]),
    "ppo_clip_fixed": (_tiny(method="ppo_clip", lag_model="fixed"), [(4, 0), (2, 1)]),
    "a3po_staggered": (_tiny(method="a3po", lag_model="staggered"), [(4, 0), (4, 1)]),
    "ppo_ewma_revised_partial": (_tiny(method="ppo_ewma_revised", lag_model="partial"), [(4, 0), (4, 1)]),
    "spo_ages": (_tiny(method="spo", lag_model="ages", age_weights=(0.5, 0.0, 0.5)), [(3, 0), (3, 1)]),
    "hopper_cengine_ppo_clip": (Config(env="Hopper-v4", method="ppo_clip", num_envs=8, unroll_length=16,
                                       total_env_steps=8 * 16 * 4, num_evals=2, eval_episodes=2, num_epochs=2,
                                       num_minibatches=2, buffer_capacity=8), [(1, 0), (4, 1)]),
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def policies_hash(path: str) -> str:
    arrays = np.load(path)
    h = hashlib.sha256()
    for k in sorted(arrays.files):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()[:16]


def _columns(rows) -> dict:
    """A hash per score column, so a change that only adds columns (a new diagnostic) is told apart
    from one that changes a number."""
    rows = rows if isinstance(rows, list) else [rows]
    names = sorted({k for r in rows for k in r})
    return {k: _sha(json.dumps([r.get(k) for r in rows], default=str).encode()) for k in names}


def _fingerprint(policies: str, rows) -> dict:
    return {"params": policies_hash(policies), "scores": _sha(json.dumps(rows, sort_keys=True, default=str).encode()),
            "columns": _columns(rows)}


def fingerprints() -> dict:
    out = {}
    for name, (config, cells) in CASES.items():
        d = tempfile.mkdtemp(prefix="fingerprint-")
        rows = runner.run_group(config, [grid.Cell(b, s) for b, s in cells], d, progress=False)
        out[name] = _fingerprint(os.path.join(d, "policies.npz"), rows)
    done = run(_tiny(method="vaco", lag_depth=4), seed=3, out=tempfile.mkdtemp(prefix="fingerprint-"), progress=False)
    out["single_run"] = _fingerprint(os.path.join(done.group_dir, "policies.npz"), done.scores)
    return out


def compare(now: dict, before: dict) -> tuple[list, dict]:
    """The cases whose parameters or existing score columns differ, and per case the columns added since
    ``before`` (a file written before per-column hashes existed compares on the whole rows)."""
    differ, added = [], {}
    for k in sorted(set(now) | set(before)):
        a, b = now.get(k), before.get(k)
        if a is None or b is None or a["params"] != b["params"]:
            differ.append(k)
        elif a["scores"] != b["scores"]:
            old = b.get("columns")
            if old is None or any(a["columns"].get(c) != h for c, h in old.items()):
                differ.append(k)
            else:
                added[k] = sorted(set(a["columns"]) - set(old))
    return differ, added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="where to write this run's fingerprints (JSON)")
    parser.add_argument("--compare", help="fingerprints written before the change, on this machine")
    args = parser.parse_args()
    if args.compare and not os.path.isfile(args.compare):
        print(f"error: compare={args.compare!r} is not a file", file=sys.stderr)
        return 2
    fp = fingerprints()
    with open(args.out, "w") as f:
        json.dump(fp, f, indent=1)
    for name, v in fp.items():
        print(f"  {name:<28} params {v['params']}  scores {v['scores']}")
    if not args.compare:
        return 0
    before = json.load(open(args.compare))
    differ, added = compare(fp, before)
    print("identical to " + args.compare if not differ else "DIFFERENT: " + ", ".join(differ))
    for name, cols in added.items():
        print(f"  {name}: same parameters and score columns; columns added: {', '.join(cols)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
