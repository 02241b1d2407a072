"""The deep-lag study's simulated programs: how each sweep's seeds are grouped into programs of at most
``PROGRAM_CELLS`` cells, and where each program's results lie (``OUT/sim/<configuration>/<method>/<sweep>/
seeds<first>-<last>/``). It imports no study: ``deep_lag_study`` runs its sweeps as these programs and
``deep_lag_findings`` counts them for FINDINGS.md without importing the study's command module.
"""

from __future__ import annotations

import os

# The most cells one simulated program runs. A sweep with more (a main sweep: 2 counterparts x 40 seeds, ~2 h
# here at ~85 s a cell) runs as programs over blocks of its seeds, each of which fits a group of runs; the
# cells, their seeds and their numbers are the protocol's, only how they are grouped into programs is not.
PROGRAM_CELLS = {"cpu": 40, "tiny": 2}


def sim_dir(out: str, c: dict, method: str, sweep: str) -> str:
    """One sweep's directory: ``OUT/sim/<configuration>/<method>/<sweep>``."""
    return os.path.join(out, "sim", c["name"], method, sweep)


def seed_blocks(seeds, variants: int, cells: int) -> list[tuple[int, ...]]:
    """A sweep's seeds in the blocks its programs run: each block at most ``cells`` cells (``variants`` x
    its seeds; at least one seed), in order."""
    seeds, per = tuple(seeds), max(1, cells // variants)
    return [seeds[i:i + per] for i in range(0, len(seeds), per)]


def sweep_shapes(study: dict, family: str) -> list[tuple[str, int, tuple[int, ...]]]:
    """(sweep, counterparts, seeds) of one configuration's sweeps as the protocol has them, before its real
    histograms exist (``deep_lag_study.sweeps_of`` gives the weights; a main sweep whose histogram and uniform counterparts
    coincide runs one)."""
    if family == "sync":
        return [("lockstep", 1, tuple(study["sim_seeds"]))]
    return [("main", 2, tuple(study["sim_seeds"])), ("control", 1, tuple(study["control_seeds"]))]


def program_dirs(out: str, c: dict, method: str, sweep: str, variants: int, seeds, cells: int) -> list[tuple]:
    """(directory, seeds) of each program of one sweep: ``<sweep>/seeds<first>-<last>/`` under ``OUT/sim``."""
    return [(os.path.join(sim_dir(out, c, method, sweep), f"seeds{b[0]}-{b[-1]}"), b)
            for b in seed_blocks(seeds, variants, cells)]


def programs_of(out: str, study: dict, configs, methods, cells: int) -> list[str]:
    """Every simulated program's directory of ``configs`` x ``methods``, finished or not (a finished one
    holds ``scores.csv``): what ``plan`` and FINDINGS count."""
    return [where for c in configs for m in methods for name, n, seeds in sweep_shapes(study, c["family"])
            for where, _ in program_dirs(out, c, m, name, n, seeds, cells)]
