"""The host-side call path of one small study, from its command line to the run directory on disk.

Runs ``vaco-lag-sweep --preset tiny --no-figures`` (one group: point_mass, PPO-Clip, lag depths 1 and 4
x seeds 0 and 1, two chunks; then ``summary.csv``) into a temporary directory under ``sys.setprofile``
and measures how the path moves between the package's modules::

    python -m benchmarks.call_path                     # point_mass (pure JAX)
    python -m benchmarks.call_path --task Hopper-v4    # the same through MuJoCo's C engine
    python -m benchmarks.call_path --show              # also print the path, one module stay a line

What is counted. A *call* is a Python function call (a profile ``call`` event) whose callee is a
function of a ``vaco_jax`` module and whose direct caller is a function of another ``vaco_jax`` module
(calls within one module, and calls reached through a third-party frame such as tyro's, are not
calls between modules). Left out: calls made while JAX runs our code for us (any ``jax``,
``jaxlib``, ``flax``, ``optax``, ``chex`` or ``orbax`` frame on the stack: tracing a jitted body,
``jax.eval_shape``, tree maps; ``--traced`` counts them too), calls made while a module body executes
(imports), other threads (the profile follows the main thread), and the figures (``--figures`` draws
them: drawing is the figure modules calling their helpers, dozens of times, and says nothing about
the group's program). So the path is the host's: parse, plan, estimate memory, assemble the group's
program, run it chunk by chunk, write results, read them back, summarise.

The *path* is every call site's first call with everything under it: a call whose site (caller
file and line, callee function) was seen before is dropped together with its subtree, so a loop's
second chunk adds nothing and the measure does not grow with the run's length. Its *stays* are the
modules the path is in, in order: a call moves it to the callee's module, the call's return back
to the caller's; consecutive equal modules are one stay.

Printed:

* ``modules``: distinct modules on the path;
* ``stays``: the length of the stay sequence;
* ``climbs``: re-entries into the driver from below: calls on the path from a module in ``core/``,
  ``envs/``, ``analysis/`` or a jax-free top-level module (``names.py``, ``errors.py``) into a module
  in ``driver/`` (imports only go down, so each one is a callback handed down);
* ``returns``: for a pair of modules {A, B}, how often the path goes back into a module it has just
  come from: three consecutive stays X, Y, X with {X, Y} = {A, B} where the move into the second X is
  a call. A calling B twice in a row (stays A, B, A, B: B returns, A calls B again) counts once; B
  calling back into A while A's call into B is open (A, B, A, the last move a call) counts once; a
  single visit (A calls B, B returns) counts nothing. The largest count over pairs is printed with
  its pair, then the total over all pairs.

The numbers depend on the code and the command only, not on the machine or its speed
(BENCHMARKS.md, "The call path of a group").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile

PACKAGE = "vaco_jax"
RUNS_OUR_CODE = ("jax", "jaxlib", "flax", "optax", "chex", "orbax")  # libraries that call back into ours
BELOW_DRIVER = ("core", "envs", "analysis", "names", "errors")


def layer(module: str) -> str:
    """``vaco_jax.driver.runner`` -> ``driver``; ``vaco_jax.names`` -> ``names``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def short(module: str) -> str:
    return module[len(PACKAGE) + 1:] if module.startswith(PACKAGE + ".") else module


class Recorder:
    """Profile hook: every call between two ``vaco_jax`` modules on the host, and its return."""

    def __init__(self, traced: bool = False):
        self.traced = traced  # also calls made while JAX traces our code
        self.events: list[tuple] = []  # ("call", index, parent, site, caller module, callee module) | ("return", index)
        self.active: dict[int, int] = {}  # id(frame) of a recorded callee -> its call's index
        self.calls = 0

    def __call__(self, frame, event, arg):
        if event == "call":
            callee = frame.f_globals.get("__name__") or ""
            if not callee.startswith(PACKAGE):
                return
            back = frame.f_back
            caller = (back.f_globals.get("__name__") or "") if back is not None else ""
            if not caller.startswith(PACKAGE) or caller == callee:
                return
            parent, f = None, back
            while f is not None:  # under JAX, or in a module body: not counted
                name = f.f_globals.get("__name__") or ""
                if (not self.traced and name.split(".")[0] in RUNS_OUR_CODE) or (f.f_code.co_name == "<module>" and name.startswith(PACKAGE)):
                    return
                if parent is None and id(f) in self.active:
                    parent = self.active[id(f)]
                f = f.f_back
            site = (back.f_code.co_filename, back.f_lineno, frame.f_code.co_filename, frame.f_code.co_qualname)
            index = self.calls
            self.calls += 1
            self.active[id(frame)] = index
            self.events.append(("call", index, parent, site, caller, callee, back.f_code.co_qualname,
                                frame.f_code.co_qualname))
        elif event == "return" and id(frame) in self.active:
            self.events.append(("return", self.active.pop(id(frame))))


def path(events: list[tuple]) -> list[tuple]:
    """The events of every call site's first call and its subtree (later calls of a site dropped with theirs)."""
    seen, kept, out = set(), set(), []
    for e in events:
        if e[0] == "call":
            _, index, parent, site = e[:4]
            if site in seen or (parent is not None and parent not in kept):
                seen.add(site)
                continue
            seen.add(site)
            kept.add(index)
            out.append(e)
        elif e[1] in kept:
            out.append(e)
    return out


def stays(events: list[tuple]) -> list[tuple[str, str]]:
    """The stay sequence: (module, how the path got there: 'start', 'call' or 'return')."""
    callers = {e[1]: e[4] for e in events if e[0] == "call"}
    out: list[tuple[str, str]] = []
    for e in events:
        if e[0] == "call":
            if not out:
                out.append((e[4], "start"))
            here, how = e[5], "call"
        else:
            here, how = callers[e[1]], "return"
        if here != out[-1][0]:
            out.append((here, how))
    return out


def measure(events: list[tuple]) -> dict:
    kept = path(events)
    seq = stays(kept)
    calls = [e for e in kept if e[0] == "call"]
    modules = sorted({m for e in calls for m in (e[4], e[5])})
    climbs = [e for e in calls if layer(e[4]) in BELOW_DRIVER and layer(e[5]) == "driver"]
    returns: collections.Counter = collections.Counter()
    for i in range(1, len(seq) - 1):
        (a, _), (b, _), (c, how) = seq[i - 1], seq[i], seq[i + 1]
        if a == c and how == "call":
            returns[tuple(sorted((short(a), short(b))))] += 1
    worst = returns.most_common(1)[0] if returns else (("-", "-"), 0)
    raw_climbs = sum(1 for e in events if e[0] == "call" and layer(e[4]) in BELOW_DRIVER and layer(e[5]) == "driver")
    return {"modules": len(modules), "module_names": [short(m) for m in modules], "stays": len(seq),
            "calls_on_path": len(calls), "calls_recorded": sum(1 for e in events if e[0] == "call"),
            "climbs": len(climbs), "climbs_recorded": raw_climbs,
            "climb_sites": [f"{short(e[4])}.{e[6]} -> {short(e[5])}.{e[7]}" for e in climbs],
            "returns_max": worst[1], "returns_max_pair": list(worst[0]), "returns_total": sum(returns.values()),
            "returns_by_pair": {" <-> ".join(k): v for k, v in returns.most_common()},
            "stay_sequence": [f"{short(m)} ({how})" for m, how in seq]}


def run(task: str, out: str, traced: bool = False, figures: bool = False) -> list[tuple]:
    """The study's command line, profiled; returns the recorded events."""
    from vaco_jax.studies import lag_sweep

    argv = ["vaco-lag-sweep", "--preset", "tiny", "--out", out, "--no-progress", "--bootstrap-reps", "100"]
    if not figures:
        argv.append("--no-figures")
    if task != "point_mass":
        argv += ["--tasks", task]
    saved, sys.argv = sys.argv, argv
    recorder = Recorder(traced)
    sys.setprofile(recorder)
    try:
        lag_sweep.cli()
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.setprofile(None)
        sys.argv = saved
    return recorder.events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="point_mass", help="the group's task (lag-sweep --tasks)")
    parser.add_argument("--json", help="also write the measures and the stay sequence here")
    parser.add_argument("--traced", action="store_true", help="also count calls made while JAX traces our code")
    parser.add_argument("--figures", action="store_true", help="also draw the figures (and count their calls)")
    parser.add_argument("--show", action="store_true", help="print the stay sequence")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="call-path-")
    try:
        events = run(args.task, os.path.join(out, "run"), args.traced, args.figures)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    m = measure(events)
    if args.show:
        print("\n".join(m["stay_sequence"]))
    command = "vaco-lag-sweep --preset tiny" + ("" if args.task == "point_mass" else f" --tasks {args.task}") \
        + ("" if args.figures else " --no-figures") + (" (traced calls too)" if args.traced else "")
    print(f"\ncall path of `{command}`: {m['calls_recorded']} calls between modules recorded, "
          f"{m['calls_on_path']} on the path (each call site's first call)")
    print(f"  modules   {m['modules']}: {', '.join(m['module_names'])}")
    print(f"  stays     {m['stays']}")
    print(f"  climbs    {m['climbs']} into the driver from below" + "".join(f"\n              {s}" for s in
                                                                           m["climb_sites"]))
    print(f"  returns   max {m['returns_max']} ({' <-> '.join(m['returns_max_pair'])}), total {m['returns_total']}")
    for pair, n in list(m["returns_by_pair"].items())[:8]:
        print(f"              {n:>3}  {pair}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
