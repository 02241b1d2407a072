"""Rebuild the documents made from the committed results (docs/evaluation.md, "Docs rebuilt from results").

Reads only ``results/`` (no training, no jax) and writes:

- ``results/claims.csv``: ``vaco_jax.analysis.claims.evaluate_study`` on ``results/study/`` (when a design has run),
  and ``results/claims_auc.csv``: the same verdicts on the area under the evaluation curve (the
  secondary score, for tasks whose final return saturates);
- FINDINGS.md's generated tables: each block between the marker lines
  ``<!-- generated: NAME (python experiments/rebuild_docs.py) -->`` and ``<!-- end generated: NAME -->``
  is replaced by ``BLOCKS[NAME]``'s text; every byte outside the blocks is kept;
- ``docs/figures/study_*.png``: the figures of ``FIGURES`` drawn by ``vaco_jax.analysis.figures`` from
  ``results/study/`` (when it exists; a figure whose data are absent is skipped with a note).

    python experiments/rebuild_docs.py            # rewrite them
    python experiments/rebuild_docs.py --check    # build into a temporary folder, compare, exit 1 if any differs

``--check`` prints each difference: a short unified diff for a text file (compared exactly), the
number of differing pixels for a PNG (compared by decoded pixels: see ``PIXEL_TOLERANCE``), and
outputs committed but no longer produced (``study_*.png`` of a figure that is now skipped,
``claims.csv`` without a study), which a rebuild removes. ``tests/test_docs_rebuilt.py`` runs it on
the committed tree. A block name missing from ``BLOCKS``, a block without its end marker or a
malformed marker line is an error naming the line (exit code 2); a damaged result file is an
error naming the file (exit code 3).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import glob
import os
import re
import sys
import tempfile
from typing import Callable

from vaco_jax.analysis import results
from vaco_jax.studies import (deep_lag_findings, lagshape_findings, locomotion_findings, pendulum_tables,
                              sim_vs_real_findings, steplag_findings)
from vaco_jax.studies.pendulum_tables import CLAIMS, CLAIMS_AUC, MAIN_DESIGN, STUDY, TUNED_WIDE

COMMAND = "python experiments/rebuild_docs.py"
FINDINGS = "FINDINGS.md"
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
# Two renderings of one figure "match" when no pixel channel differs by more than this (colours in
# [0, 1]). Rendering noise (a coordinate that moved by a rounding error, e.g. a CI computed on
# another CPU type) changes an edge pixel's antialiased coverage by a few hundredths at most; a
# curve, band edge or glyph that moved by a pixel or more changes some pixel by far more (a line
# pixel turning white is ~0.6-0.9, a light CI band ~0.15).
PIXEL_TOLERANCE = 0.1
DIFF_LINES = 40  # lines of unified diff printed per differing text file
BEGIN = re.compile(r"<!-- generated: (\S+) \(python experiments/rebuild_docs\.py\) -->")
END = re.compile(r"<!-- end generated: (\S+) -->")
MARKER_START = ("<!-- generated:", "<!-- end generated:")


class DocsError(ValueError):
    """FINDINGS.md's generated blocks cannot be rebuilt (unknown name, missing end marker ...)."""


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
                 steplag_findings.steplag_summary(build.root), lagshape_findings.lagshape_summary(build.root)):
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


# ----------------------------------------------------------------------------- FINDINGS.md

def _lines(text: str) -> list[str]:
    """Lines with their ends (only "\\n" ends a line: FINDINGS.md holds other Unicode separators verbatim)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def blocks(text: str, where: str = FINDINGS) -> list[tuple[str, int, int]]:
    """``(name, begin line index, end line index)`` of every generated block, checked."""
    found, open_block = [], None
    for i, line in enumerate(_lines(text)):
        bare = line.rstrip("\r\n")
        if not bare.startswith(MARKER_START):
            continue
        begin, end = BEGIN.fullmatch(bare), END.fullmatch(bare)
        if begin and open_block:
            raise DocsError(f"{where}:{open_block[1] + 1}: generated block {open_block[0]!r} has no end marker "
                            f"'<!-- end generated: {open_block[0]} -->' before line {i + 1}")
        if begin:
            if begin.group(1) not in BLOCKS:
                raise DocsError(f"{where}:{i + 1}: unknown generated block {begin.group(1)!r} "
                                f"(known: {', '.join(BLOCKS)})")
            open_block = (begin.group(1), i)
        elif end and open_block and end.group(1) == open_block[0]:
            found.append((open_block[0], open_block[1], i))
            open_block = None
        elif end:
            raise DocsError(f"{where}:{i + 1}: end marker of {end.group(1)!r} without its "
                            f"'<!-- generated: {end.group(1)} ({COMMAND}) -->' line"
                            + (f" (block {open_block[0]!r} of line {open_block[1] + 1} is open)" if open_block else ""))
        else:
            raise DocsError(f"{where}:{i + 1}: malformed marker line {bare!r}; the markers are "
                            f"'<!-- generated: NAME ({COMMAND}) -->' and '<!-- end generated: NAME -->'")
    if open_block:
        raise DocsError(f"{where}:{open_block[1] + 1}: generated block {open_block[0]!r} has no end marker "
                        f"'<!-- end generated: {open_block[0]} -->'")
    return found


def render(text: str, build: Build, where: str = FINDINGS) -> str:
    """``text`` with every generated block's content replaced; the rest kept byte for byte."""
    lines = _lines(text)
    spans = blocks(text, where)
    out, pos = [], 0
    for name, begin, end in spans:
        body = BLOCKS[name](build)
        out += lines[pos:begin + 1] + [body if body.endswith("\n") else body + "\n"]
        pos = end
    return "".join(out + lines[pos:])


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
    results.atomic_write_text(build.dst(FINDINGS), render(_findings_text(build), build))
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
    blocks(_findings_text(build))
    return write_claims(build) + write_findings(build) + write_figures(build) + write_demo_figure(build)


def owned(root: str) -> list[str]:
    """The outputs of this script that exist under ``root`` (whether or not they would be produced now)."""
    found = [c for c in (CLAIMS, CLAIMS_AUC) for c in (c, c + results.CHECKSUM_SUFFIX) if os.path.exists(os.path.join(root, c))]
    found += [DEMO_FIGURE] if os.path.exists(os.path.join(root, DEMO_FIGURE)) else []
    pattern = os.path.join(root, FIGURE_DIR, f"{FIGURE_PREFIX}*.png")
    return found + sorted(os.path.relpath(p, root) for p in glob.glob(pattern))


# ----------------------------------------------------------------------------- --check

def _text_difference(rel: str, old: bytes, new: bytes) -> str | None:
    if old == new:
        return None
    a, b = (_lines(x.decode(errors="replace")) for x in (old, new))
    diff = [d.rstrip("\n") for d in difflib.unified_diff(a, b, f"{rel} (committed)", f"{rel} (rebuilt)", n=1)]
    more = f"\n  ... {len(diff) - DIFF_LINES} more diff lines" if len(diff) > DIFF_LINES else ""
    return f"differs: {rel}\n" + "\n".join("  " + d for d in diff[:DIFF_LINES]) + more


def _png_difference(rel: str, old_path: str, new_path: str) -> str | None:
    from matplotlib import image

    a, b = image.imread(old_path), image.imread(new_path)
    if a.shape != b.shape:
        return f"differs: {rel} (image of {a.shape[1]}x{a.shape[0]} pixels, rebuilt {b.shape[1]}x{b.shape[0]})"
    delta = abs(a.astype(float) - b.astype(float))
    worst = delta.max(axis=-1) if delta.ndim == 3 else delta
    n = int((worst > PIXEL_TOLERANCE).sum())
    if not n:
        return None
    return (f"differs: {rel} ({n} pixels differ by more than {PIXEL_TOLERANCE} in a colour channel, "
            f"at most by {worst.max():.2f})")


def compare(root: str, out: str, produced: list[str]) -> list[str]:
    """One message per output that differs between ``root`` (committed) and ``out`` (rebuilt)."""
    problems = []
    for rel in produced:
        committed, rebuilt = os.path.join(root, rel), os.path.join(out, rel)
        if not os.path.exists(committed):
            problems.append(f"missing: {rel} (produced, not committed)")
        elif rel.endswith(".png"):
            problems.append(_png_difference(rel, committed, rebuilt))
        else:
            with open(committed, "rb") as f, open(rebuilt, "rb") as g:
                problems.append(_text_difference(rel, f.read(), g.read()))
    problems += [f"stale: {rel} (committed, no longer produced)" for rel in owned(root) if rel not in produced]
    return [p for p in problems if p]


def check(root: str) -> int:
    with tempfile.TemporaryDirectory() as out:
        produced = build_all(Build(root, out))
        problems = compare(root, out, produced)
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
