"""Rebuild the documents made from the committed results (docs/evaluation.md, "Docs rebuilt from results").

Reads only ``results/`` (no training, no jax) and writes:

- ``results/claims.csv``: ``vaco_jax.analysis.claims.evaluate_study`` on ``results/study/`` (when a design has run),
  and ``results/claims_auc.csv``: the same verdicts on the area under the evaluation curve (the
  secondary score, for tasks whose final return saturates);
- FINDINGS.md's generated tables: each block between its marker lines (``rebuild_docs_blocks``) is
  replaced by ``BLOCKS[NAME]``'s text; every byte outside the blocks is kept;
- ``docs/figures/study_*.png``: the figures of ``FIGURES`` drawn by ``vaco_jax.analysis.figures`` from
  ``results/study/`` (when it exists; a figure whose data are absent is skipped with a note).

    python experiments/rebuild_docs.py            # rewrite them
    python experiments/rebuild_docs.py --check    # build into a temporary folder, compare, exit 1 if any differs

``--check`` prints each difference (``rebuild_docs_compare``: a text file compared exactly, a PNG by
its decoded pixels) and the outputs committed but no longer produced (``study_*.png`` of a figure that
is now skipped, ``claims.csv`` without a study), which a rebuild removes. ``tests/test_docs_rebuilt.py``
runs it on the committed tree. A block name missing from ``BLOCKS``, a block without its end marker or
a malformed marker line is an error naming the line (exit code 2); a damaged result file is an error
naming the file (exit code 3).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import sys
import tempfile
from typing import Callable

from vaco_jax.analysis import results
from vaco_jax.studies import (adaptive_findings, deep_lag_findings, lagshape_findings, locomotion_findings,
                              pendulum_tables, sim_vs_real_findings, steplag_findings)
from vaco_jax.studies.pendulum_tables import CLAIMS, CLAIMS_AUC, MAIN_DESIGN, STUDY, TUNED_WIDE
from vaco_jax.studies.rebuild_docs_blocks import COMMAND, FINDINGS, DocsError, blocks, render
from vaco_jax.studies.rebuild_docs_compare import compare

FIGURE_DIR = os.path.join("docs", "figures")
FIGURE_PREFIX = "study_"
# docs/figures/study_<name>.png  <-  vaco_jax.analysis.figures.<function>(results/study, *args)
FIGURES = (  # paper width (<= 7 in, FIGURE_MAX_INCHES); one-task figures drop their redundant panels
    ("interval_estimates", "plot_interval_estimates", ("final_eval_return", "normalized")),
    ("interval_estimates_own_b1", "plot_interval_estimates", ("final_eval_return", "own_b1")),
    ("interval_estimates_auc", "plot_interval_estimates", ("auc_eval_return", "normalized")),
    ("probability_of_improvement", "plot_probability_of_improvement", ()),
    ("performance_profiles", "plot_performance_profiles", ()),
    ("iqm_curves", "plot_iqm_curves", ()),
    ("staleness", "plot_staleness", ()),
)
FIGURE_MAX_INCHES = 7.0
# The main job's committed run (`make demo`'s runs/lag_sweep_demo/, copied without its figures) and the
# README's figure drawn from it.
DEMO = os.path.join("results", "demo")
DEMO_FIGURE = os.path.join(FIGURE_DIR, "demo_auc.png")
# The fourth screen: DM Control tasks at the learning rate every method chose (results/screens_lr1e-3/).
SCREENS_LR = ("CartpoleSwingup_2m", "PointMass_1m", "CartpoleBalance_600k")


@dataclasses.dataclass(frozen=True)
class Build:
    """Inputs are read under ``root``; every output is written under ``out`` (``root`` itself, or a
    temporary folder for ``--check``)."""

    root: str
    out: str

    def src(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def dst(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    @property
    def study(self) -> str:
        """The study's main design (claims 1, 2, 6: every task, B in {1, 4, 16}): tables and figures."""
        return self.src(STUDY, MAIN_DESIGN)

    def has_study(self) -> bool:
        return os.path.exists(os.path.join(self.study, "run.json"))

    def has_any_design(self) -> bool:
        from vaco_jax.analysis import claims
        return any(os.path.exists(self.src(STUDY, d, "run.json")) for d in claims.study_designs())


PEER = os.path.join("results", "peer_check")


def summary_block(build: Build) -> str:
    """FINDINGS.md's first screen: where each study stands, read from ``results/`` alone (each study's
    lines from its own findings module)."""
    from vaco_jax.analysis import peer

    out = ["Where each study stands, read from `results/` by `python experiments/rebuild_docs.py` (the dated "
           "record follows below).", ""]
    out += locomotion_findings.locomotion_summary(build.root)
    if os.path.isdir(build.src(PEER)):
        recs = peer.records(build.src(PEER))
        parts = []
        for r in recs:
            if r["inside"] is None:
                continue
            where = "inside" if r["inside"] else ("above" if r["mean"] > r["cleanrl"][0] else "below")
            by = "" if r["trainer"] == "vaco_jax" else f" ({r['trainer']})"
            against = "" if r["source"].startswith("CleanRL") else f" ({r['source']}: {r['cleanrl'][0]:,.0f} ± {r['cleanrl'][1]:,.0f})"
            parts.append(f"{r['task']} {r['settings']}{by}: {r['mean']:,.0f} ± {r['std']:,.0f}, {where}{against}")
        out += ["- **The peer check** against published 1M-step PPO numbers — CleanRL's table, and for a task it "
                "does not cover the publication named beside it (`results/peer_check/`, "
                "`python -m benchmarks.peer_check --table`; inside means the published mean ± 2 std): "
                + "; ".join(parts) + ".", ""]
    for line in (sim_vs_real_findings.sim_vs_real_summary(build.root), deep_lag_findings.deep_lag_summary(build.root),
                 steplag_findings.steplag_summary(build.root), lagshape_findings.lagshape_summary(build.root),
                 adaptive_findings.adaptive_summary(build.root)):
        if line:
            out += [line, ""]
    out += pendulum_tables.pendulum_summary(build)
    loco_figures = sorted(glob.glob(os.path.join(build.src("docs", "figures", "locomotion"), "*.png")))
    out += ["- **Figures**: `docs/figures/study_*.png` (the pendulum-suite study: `python experiments/rebuild_docs.py`); "
            + (f"`docs/figures/locomotion/` ({len(loco_figures)} figures of the locomotion study, pooled and per "
               "task: `python experiments/locomotion.py report`); " if loco_figures else
               "the locomotion study's (`docs/figures/locomotion/`) are drawn by `python experiments/locomotion.py "
               "report` once its units are done; ")
            + "the README's figure (`make demo`)."]
    return "\n".join(out).rstrip("\n") + "\n"


def _screens(build: Build, folder: str) -> str:
    """The table of ``results/FOLDER/screens.csv`` (one screen run)."""
    return pendulum_tables.screens_table(build.src("results", folder, "screens.csv"))


# name -> markdown text of FINDINGS.md's block <!-- generated: name (...) -->; add a block by adding an entry
BLOCKS: dict[str, Callable[[Build], str]] = {
    "screens": lambda b: _screens(b, "screens"),
    "screens_2m": lambda b: _screens(b, "screens_2m"),
    "screens_ip_61k": lambda b: _screens(b, "screens_ip_61k"),
    "screens_pointmass_1m": lambda b: _screens(b, "screens_pointmass_1m"),
    "screens_lr1e-3": lambda b: pendulum_tables.screens_table(
        *(b.src("results", "screens_lr1e-3", d, "screens.csv") for d in SCREENS_LR), steps=True),
    "screens_more": lambda b: pendulum_tables.screens_folder_table(b, "screens_more"),
    "screens_6": lambda b: pendulum_tables.screens_folder_table(b, "screens_6"),
    "study_machine": pendulum_tables.machine_table,
    "study_tuned": pendulum_tables.tuned_table,
    "study_lr_wide_tuned": lambda b: pendulum_tables.tuned_table(b, TUNED_WIDE),
    "study_lr_wide_iqm": pendulum_tables.wide_iqm_table,
    "study_claims": pendulum_tables.claims_table,
    "study_claims_auc": lambda b: pendulum_tables.claims_table(b, CLAIMS_AUC),
    "study_iqm": pendulum_tables.study_iqm_table,
    "study_cost": pendulum_tables.cost_table,
    "summary": summary_block,
    "locomotion_units": lambda b: locomotion_findings.locomotion_units_table(b.root),
    "locomotion_verdicts": lambda b: locomotion_findings.locomotion_verdicts_table(b.root),
    "locomotion_diagnostics": lambda b: locomotion_findings.locomotion_diagnostics_table(b.root),
    "sim_vs_real": lambda b: sim_vs_real_findings.sim_vs_real_table(b.root),
    "deep_lag": lambda b: deep_lag_findings.deep_lag_table(b.root),
    "steplag_stage2": lambda b: steplag_findings.steplag_stage2_table(b.root),
}


# ----------------------------------------------------------------------------- outputs

def write_claims(build: Build) -> list[str]:
    if not build.has_any_design():
        print(f"[rebuild_docs] no design of the study under {STUDY}: {CLAIMS} not built")
        return []
    from vaco_jax.analysis import claims
    claims.evaluate_study(build.src(STUDY), out=build.dst(CLAIMS))
    claims.evaluate_study(build.src(STUDY), out=build.dst(CLAIMS_AUC), score="auc_eval_return")
    return [CLAIMS, CLAIMS + results.CHECKSUM_SUFFIX, CLAIMS_AUC, CLAIMS_AUC + results.CHECKSUM_SUFFIX]


def _findings_text(build: Build) -> str:
    with open(build.src(FINDINGS), encoding="utf-8", newline="") as f:
        return f.read()


def write_findings(build: Build) -> list[str]:
    results.atomic_write_text(build.dst(FINDINGS), render(_findings_text(build), BLOCKS, build))
    return [FINDINGS]


def write_figures(build: Build) -> list[str]:
    if not build.has_study():
        print(f"[rebuild_docs] no {STUDY}/{MAIN_DESIGN}/run.json: no {FIGURE_DIR}/{FIGURE_PREFIX}*.png")
        return []
    from matplotlib import style

    from vaco_jax.analysis import figures
    written = []
    os.makedirs(build.dst(FIGURE_DIR), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, style.context("default"):  # no local matplotlibrc
        for name, function, args in FIGURES:
            try:
                paths = getattr(figures, function)(build.study, *args, figures_dir=tmp)
            except figures.NoData as e:
                print(f"[rebuild_docs] skipped {FIGURE_PREFIX}{name}.png: {e}")
                continue
            rel = os.path.join(FIGURE_DIR, f"{FIGURE_PREFIX}{name}.png")
            results.atomic_copy(next(p for p in paths if p.endswith(".png")), build.dst(rel))
            written.append(rel)
    return written


def write_demo_figure(build: Build) -> list[str]:
    """The README's figure: the main job's AUC against lag depth, from its committed run ``results/demo``."""
    if not os.path.exists(build.src(DEMO, "summary.csv")):
        print(f"[rebuild_docs] no {DEMO}/summary.csv: {DEMO_FIGURE} not drawn")
        return []
    from matplotlib import style

    from vaco_jax.analysis import figures
    os.makedirs(build.dst(FIGURE_DIR), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, style.context("default"):
        paths = figures.plot_aggregate_vs_lag(build.src(DEMO), "auc_eval_return", "normalized", figures_dir=tmp)
        results.atomic_copy(next(p for p in paths if p.endswith(".png")), build.dst(DEMO_FIGURE))
    return [DEMO_FIGURE]


def build_all(build: Build) -> list[str]:
    """Every output under ``build.out``; returns their paths relative to it. FINDINGS.md's markers are
    checked before anything is written; claims.csv comes first: FINDINGS.md's claims table reads it."""
    blocks(_findings_text(build), BLOCKS)
    return write_claims(build) + write_findings(build) + write_figures(build) + write_demo_figure(build)


def owned(root: str) -> list[str]:
    """The outputs of this script that exist under ``root`` (whether or not they would be produced now)."""
    found = [c for c in (CLAIMS, CLAIMS_AUC) for c in (c, c + results.CHECKSUM_SUFFIX) if os.path.exists(os.path.join(root, c))]
    found += [DEMO_FIGURE] if os.path.exists(os.path.join(root, DEMO_FIGURE)) else []
    pattern = os.path.join(root, FIGURE_DIR, f"{FIGURE_PREFIX}*.png")
    return found + sorted(os.path.relpath(p, root) for p in glob.glob(pattern))


def check(root: str) -> int:
    with tempfile.TemporaryDirectory() as out:
        produced = build_all(Build(root, out))
        problems = compare(root, out, produced, owned(root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} file(s) differ from what `{COMMAND}` produces from results/: run it and commit")
        return 1
    print(f"up to date: {', '.join(produced)}")
    return 0


def rebuild(root: str) -> int:
    produced = build_all(Build(root, root))
    for rel in owned(root):
        if rel not in produced:
            os.remove(os.path.join(root, rel))
            print(f"removed {rel} (no longer produced)")
    print(f"wrote {', '.join(produced)}")
    return 0


def main(argv: list[str] | None = None, root: str = ".") -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="build into a temporary folder, compare with the committed files, exit 1 if any differs")
    parser.add_argument("--root", default=root, help=f"repository whose results/ are read and whose docs are written "
                        f"(default: {root})")
    args = parser.parse_args(argv)
    try:
        return check(args.root) if args.check else rebuild(args.root)
    except DocsError as e:
        print(f"error: {e}", file=sys.stderr)
        return results.EXIT_BAD_INPUT
    except results.ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return results.EXIT_DAMAGED


def cli(root: str = ".") -> None:
    """The command line: ``experiments/rebuild_docs.py`` passes its repository as ``root``;
    ``python -m vaco_jax rebuild-docs`` works on the current directory."""
    sys.exit(main(root=root))


if __name__ == "__main__":
    cli()
