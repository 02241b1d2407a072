"""experiments/rebuild_docs.py: the committed docs are what the committed results give, and its
--check / marker handling on tiny synthetic results trees (no training)."""

from __future__ import annotations

import os
import shutil

from conftest import study_module
import numpy as np
import pytest

from vaco_jax.analysis import tables

from vaco_jax.analysis import results
from vaco_jax.studies import pendulum_tables, rebuild_docs_blocks, rebuild_docs_compare

from test_plots import RANDOM, TASKS, _write_group

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- generated: {} (python experiments/rebuild_docs.py) -->\n"
END = "<!-- end generated: {} -->\n"


def _rebuild_docs():
    return study_module("rebuild_docs")


def test_committed_docs_are_what_the_committed_results_give(capsys):
    """FINDINGS.md's generated tables, results/claims.csv and docs/figures/study_*.png: rebuilt from
    results/ they must equal the committed files (else run `python experiments/rebuild_docs.py`)."""
    code = _rebuild_docs().main(["--check"])
    out = capsys.readouterr().out
    assert code == 0, out


# ----------------------------------------------------------------------------- a synthetic tree

def _screen_row(env: str, b1: float, b16: float) -> dict:
    rnd, top = 10.0, 1000.0
    learned = (b1 - rnd) / (top - rnd)
    loss = 1 - (b16 - rnd) / (b1 - rnd)
    return {"env": env, "random": rnd, "reachable": top, "ppo_clip_b1": b1, "ppo_clip_b1_half": 0.5 * b1,
            "ppo_clip_b16": b16, "learned_fraction": learned, "half_over_final": (0.5 * b1 - rnd) / (b1 - rnd),
            "lag_loss_b16": loss, "learnable": learned >= 0.5, "lag_sensitive": loss >= 0.1,
            "chosen": learned >= 0.5 and loss >= 0.1, "seeds": 2}


def _write_screens(root, b1: float = 800.0) -> None:
    for name in ("screens", "screens_2m"):
        os.makedirs(root / "results" / name, exist_ok=True)
        rows = [_screen_row("taskA", b1, 300.0), _screen_row("taskB", 900.0, 880.0)]
        results.write_table(str(root / "results" / name / "screens.csv"), rows)


HEAD = "# Findings\n\nKept as is: tabs\t, trailing spaces   , Unicode − × ≥, a line separator \u2028 inside.\n\n"
TAIL = "\nAfter the table: kept too.\r\nno final newline"


def _tree(tmp_path, findings: str | None = None):
    _write_screens(tmp_path)
    text = findings if findings is not None else (HEAD + BEGIN.format("screens") + "| old | hand table |\n"
                                                  + END.format("screens") + TAIL)
    (tmp_path / "FINDINGS.md").write_bytes(text.encode())
    return tmp_path


def test_check_fails_on_a_changed_screen_number_and_names_the_file(tmp_path, capsys):
    rd = _rebuild_docs()
    root = _tree(tmp_path)
    assert rd.main(["--root", str(root)]) == 0
    assert rd.main(["--root", str(root), "--check"]) == 0
    assert "up to date: FINDINGS.md" in capsys.readouterr().out
    findings = (root / "FINDINGS.md").read_bytes()
    assert "| taskA | 10.0 | 800.0 | 0.80 |" in findings.decode()

    _write_screens(root, b1=812.0)  # a new screen result, written with its checksum
    assert rd.main(["--root", str(root), "--check"]) == 1
    out = capsys.readouterr().out
    assert "differs: FINDINGS.md" in out
    assert "-| taskA | 10.0 | 800.0 |" in out and "+| taskA | 10.0 | 812.0 |" in out
    assert (root / "FINDINGS.md").read_bytes() == findings  # --check writes nothing into the tree


def test_text_outside_the_markers_is_kept_byte_for_byte(tmp_path):
    rd = _rebuild_docs()
    root = _tree(tmp_path)
    assert rd.main(["--root", str(root)]) == 0
    new = (root / "FINDINGS.md").read_bytes().decode()
    assert new.startswith(HEAD + BEGIN.format("screens") + "| task | random | PPO-Clip B = 1 |")
    assert new.endswith(END.format("screens") + TAIL)
    assert "hand table" not in new
    assert rd.main(["--root", str(root)]) == 0
    assert (root / "FINDINGS.md").read_bytes().decode() == new  # a second rebuild changes nothing


@pytest.mark.parametrize("findings, message", [
    (HEAD + BEGIN.format("screens") + "| a |\n" + TAIL, r"FINDINGS\.md:5: generated block 'screens' has no end marker"),
    (BEGIN.format("screens") + "x\n" + BEGIN.format("screens_2m") + END.format("screens_2m"),
     r"FINDINGS\.md:1: generated block 'screens' has no end marker .* before line 3"),
    (HEAD + BEGIN.format("no_such_table") + END.format("no_such_table"),
     r"FINDINGS\.md:5: unknown generated block 'no_such_table' \(known: screens, screens_2m"),
    ("text\n" + END.format("screens"), r"FINDINGS\.md:2: end marker of 'screens' without its"),
    ("<!-- generated: screens -->\n", r"FINDINGS\.md:1: malformed marker line"),
])
def test_bad_markers_are_errors_naming_the_line(tmp_path, capsys, findings, message):
    rd = _rebuild_docs()
    root = _tree(tmp_path, findings)
    with pytest.raises(rd.DocsError, match=message):
        rebuild_docs_blocks.blocks(findings, rd.BLOCKS)
    assert rd.main(["--root", str(root)]) == 2
    assert "error: FINDINGS.md:" in capsys.readouterr().err
    assert (root / "FINDINGS.md").read_bytes() == findings.encode()  # nothing written


def test_an_edited_results_table_is_refused_not_read(tmp_path, capsys):
    rd = _rebuild_docs()
    root = _tree(tmp_path)
    path = root / "results" / "screens" / "screens.csv"
    path.write_text(path.read_text().replace("800.0", "812.0"))  # edited by hand: its checksum no longer fits
    assert rd.main(["--root", str(root), "--check"]) == 3
    assert "screens.csv: checksum mismatch" in capsys.readouterr().err


def test_the_screen_tables_follow_the_screen_rules():
    rd = _rebuild_docs()
    text = pendulum_tables.screens_table(os.path.join(REPO, "results", "screens_2m", "screens.csv"))
    assert ("| CartpoleSwingup | 20.0 | 510.1 | 0.50 | 0.66 | 605.6 | −0.19 | yes (just) | no (B = 16 higher) |"
            in text)
    # B = 1 got 3% of the way: its "loss" at B = 16 is not judged (MIN_PROGRESS), so not shown
    assert "| AcrobotSwingup | 7.5 | 39.2 | 0.03 | 0.31 | 25.8 | — | no | no |" in text
    # screens of several budgets in one table, each row with its runs' env steps (from run.json)
    text = pendulum_tables.screens_table(*(os.path.join(REPO, "results", "screens_lr1e-3", d, "screens.csv")
                                           for d in rd.SCREENS_LR), steps=True)
    lines = [line for line in text.splitlines() if line.startswith("| ") and "task" not in line]
    assert [line.split(" | ")[:2] for line in lines] == [
        ["| CartpoleSwingup", "2,000,000"], ["| PointMass", "1,000,000"], ["| CartpoleBalance", "600,000"]]


# ----------------------------------------------------------------------------- PNG comparison

def _png(path, image) -> str:
    from matplotlib import image as mpl_image

    mpl_image.imsave(str(path), image)
    return str(path)


def test_png_comparison_tolerates_rendering_noise_not_a_changed_curve(tmp_path):
    rng = np.random.default_rng(0)
    base = np.ones((60, 80, 3))
    base[30, 10:70] = (0.84, 0.15, 0.16)  # a red line
    committed = _png(tmp_path / "a.png", base)
    noisy = np.clip(base + rng.uniform(-0.04, 0.04, base.shape), 0, 1)  # antialiasing-sized differences
    assert rebuild_docs_compare.png_difference("f.png", committed, _png(tmp_path / "b.png", noisy)) is None
    moved = np.ones((60, 80, 3))
    moved[31, 10:70] = (0.84, 0.15, 0.16)  # the same line one pixel lower
    message = rebuild_docs_compare.png_difference("f.png", committed, _png(tmp_path / "c.png", moved))
    assert message.startswith("differs: f.png (120 pixels differ by more than 0.1")
    assert "image of 80x60 pixels, rebuilt 80x61" in rebuild_docs_compare.png_difference(
        "f.png", committed, _png(tmp_path / "d.png", np.ones((61, 80, 3))))


# ----------------------------------------------------------------------------- a synthetic study

STUDY_BLOCKS = (HEAD + BEGIN.format("study_claims") + END.format("study_claims") + "\n"
                + BEGIN.format("study_claims_auc") + END.format("study_claims_auc") + "\n"
                + BEGIN.format("study_iqm") + END.format("study_iqm") + TAIL)


def _study(run_dir: str, reps: int = 200) -> None:
    """2 tasks x PPO-Clip and VACO x lag depths 1, 4, 16 x 3 seeds, with its summary.csv."""
    rng = np.random.default_rng(0)
    os.makedirs(run_dir)
    results.write_json(os.path.join(run_dir, "run.json"), {"command": {"bootstrap_reps": reps}, "versions": {}})
    results.write_json(os.path.join(run_dir, "random_scores.json"), RANDOM)
    for task in TASKS:
        for method in ("ppo_clip", "vaco"):
            _write_group(os.path.join(run_dir, task, method), task, method, (1, 4, 16), (0, 1, 2), {}, rng, 1.0)
    tables.summarise(run_dir, reps=reps)


@pytest.fixture(scope="module")
def study_tree(tmp_path_factory):
    root = _tree(tmp_path_factory.mktemp("study"), STUDY_BLOCKS)
    _study(str(root / "results" / "study" / "lag"))
    (root / "docs" / "figures").mkdir(parents=True)
    (root / "docs" / "figures" / "study_dropped_figure.png").write_bytes(b"from an older list")
    assert _rebuild_docs().main(["--root", str(root)]) == 0
    return root


def test_the_study_builds_claims_tables_and_figures(study_tree, tmp_path):
    rd = _rebuild_docs()
    # every figure but the staleness histograms (the synthetic study writes no staleness.npz)
    names = sorted(f"study_{name}.png" for name, _, _ in rd.FIGURES if name != "staleness")
    assert sorted(os.listdir(study_tree / "docs" / "figures")) == names  # the stale figure was removed
    from matplotlib.image import imread

    for name in names:  # paper width: at most FIGURE_MAX_INCHES at the PNGs' 150 dpi
        assert imread(str(study_tree / "docs" / "figures" / name)).shape[1] <= rd.FIGURE_MAX_INCHES * 150, name
    findings = (study_tree / "FINDINGS.md").read_text()
    assert "| 1a: VACO keeps >= 0.9 of its own B=1 IQM at B=16 |" in findings
    # the second claims table: the same rule on the area under the eval curve, and its CSV
    auc = results.read_table(str(study_tree / "results" / "claims_auc.csv"))
    assert next(r for r in auc if r["claim"] == "1b")["statistic"].endswith("score: auc_eval_return")
    assert findings.count("| 1a: VACO keeps >= 0.9 of its own B=1 IQM at B=16 |") == 2
    assert "| hopper | VACO | 16 |" in findings
    # the pooled rows are the study's summary.csv rows (same function, replicates and seed)
    summary = results.read_table(str(study_tree / "results" / "study" / "lag" / "summary.csv"))

    def iqm(norm, spec):
        r = next(r for r in summary if (r["score"], r["normalization"], r["aggregate"], r["method"], r["lag_depth"])
                 == ("final_eval_return", norm, "iqm", "vaco", 4))
        return f"{r['point']:{spec}} [{r['low']:{spec}}, {r['high']:{spec}}]", r

    (raw, row), (norm, _) = iqm("raw", ",.1f"), iqm("normalized", ".2f")
    assert row["n_diverged"] == 1  # test_plots' diverged run: hopper, vaco, B = 4, seed 2
    assert f"| all 2 tasks | VACO | 4 | {raw} | {norm} | 2 | 1 |" in findings
    # a second build gives the same bytes (no date or version in the PNGs), so --check has nothing to say
    produced = rd.build_all(rd.Build(str(study_tree), str(tmp_path)))
    assert rebuild_docs_compare.compare(str(study_tree), str(tmp_path), produced, rd.owned(str(study_tree))) == []
    for rel in produced:
        assert (study_tree / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel


def test_check_names_a_changed_study_figure_and_table(tmp_path, monkeypatch, capsys):
    rd = _rebuild_docs()
    monkeypatch.setattr(rd, "FIGURES", rd.FIGURES[:1])  # one figure is enough here, and faster
    root = _tree(tmp_path, STUDY_BLOCKS)
    run = str(root / "results" / "study" / "lag")
    _study(run, reps=50)
    assert rd.main(["--root", str(root)]) == 0
    summary = results.read_table(os.path.join(run, "summary.csv"))
    for r in summary:
        if (r["method"], r["lag_depth"], r["normalization"], r["aggregate"]) == ("vaco", 16, "normalized", "iqm"):
            r.update(point=0.2, low=0.1, high=0.3)  # the figure's VACO line drops at B = 16
    results.write_table(os.path.join(run, "summary.csv"), summary)
    group = os.path.join(run, "hopper", "vaco")
    scores = results.read_table(os.path.join(group, "scores.csv"))
    scores[-1]["final_eval_return"] = 1.0  # a vaco run at B = 16 now ends near random
    results.write_table(os.path.join(group, "scores.csv"), scores)
    capsys.readouterr()
    assert rd.main(["--root", str(root), "--check"]) == 1
    out = capsys.readouterr().out
    assert "differs: docs/figures/study_interval_estimates.png (" in out
    assert "differs: FINDINGS.md" in out and "| hopper | VACO | 16 |" in out


def test_the_cost_block_reads_the_learner_cost_table(tmp_path):
    rd = _rebuild_docs()
    build = rd.Build(str(tmp_path), str(tmp_path))
    assert "does not exist yet" in pendulum_tables.cost_table(build)
    path = tmp_path / "results" / "study" / "proximal" / "learner_cost.csv"
    path.parent.mkdir(parents=True)
    rows = [{"env": "hopper", "method": m, "round": r, "learner_ms": ms + r, "lag_depth": 16}
            for r in range(2) for m, ms in (("a3po", 9.0), ("decoupled_recompute", 11.0))]
    results.write_table(str(path), rows)
    results.write_json(str(path)[:-4] + ".json", {"measurements": [
        {"tasks": ["hopper"], "cpu": "AMD EPYC", "cpu_count": 2, "jax": "0.10.2", "date": "2026-11-30 19:00 UTC"}]})
    assert "| hopper | 2 | 9.50 | 11.50 | 0.826 | AMD EPYC, 2 cores, jax 0.10.2 | 2026-11-30 19:00 UTC |" \
        in pendulum_tables.cost_table(build)


def test_the_summary_follows_the_locomotion_study_and_the_peer_check(tmp_path):
    """FINDINGS.md's first screen is rebuilt from results/: a unit that finishes, a frozen tuning and a
    peer-check record change it; nothing in it is written by hand."""
    import json

    rd = _rebuild_docs()
    root = _tree(tmp_path, HEAD + BEGIN.format("summary") + "stale\n" + END.format("summary") + TAIL)
    loco = root / "results" / "locomotion"
    os.makedirs(loco)
    (loco / "protocol.json").write_text(json.dumps({"tasks": ["Hopper-v4"], "methods": ["ppo_clip", "vaco"]}))
    results.write_table(str(loco / "manifest.csv"), [{"unit": "tune/ppo_clip", "runs": 18}])
    grid = [{"value": 0.2, "mean": 2047.0, "runs": 3, "diverged": 0}, {"value": 0.6, "mean": 941.0, "runs": 3,
                                                                         "diverged": 0}]
    results.write_json(str(loco / "tuned.json"), {"chosen": {"ppo_clip": {"1": {"knob": "clip_epsilon", "value": 0.2,
                                                                                "grid": grid}}}})
    os.makedirs(root / "results" / "peer_check")
    results.write_json(str(root / "results" / "peer_check" / "Hopper-v4_cleanrl.json"),
                       {"task": "Hopper-v4", "settings": "cleanrl", "scores": [2300.0, 2500.0], "diverged": [False, False]})
    assert rd.main(["--root", str(root)]) == 0
    text = (root / "FINDINGS.md").read_text()
    assert "stale" not in text and "1 units finished — tune 1 (ppo_clip)" in text
    assert "| PPO-Clip | clip_epsilon | 0.2 (AUC 2,047) |" in text
    assert "Hopper-v4 cleanrl: 2,400 ± 141, inside" in text and "No verdict yet" in text
    assert "No deviation from the protocol is recorded" in text
    results.write_table(str(loco / "manifest.csv"), [{"unit": "tune/ppo_clip", "runs": 18},
                                                     {"unit": "tune/vaco", "runs": 18}])
    assert rd.main(["--root", str(root), "--check"]) == 1  # a finished unit: the summary is out of date
    results.write_table(str(loco / "deviations.csv"), [{"date": "2026-12-05 10:00 UTC", "protocol_sha256": "x",
                                                        "previous": "y", "deviation": "a seed added"}])
    assert rd.main(["--root", str(root)]) == 0
    assert ("Deviations from the protocol (`results/locomotion/deviations.csv`), 1: 2026-12-05 10:00 UTC: a seed "
            "added.") in (root / "FINDINGS.md").read_text()


def _loco_scores(task, method, depths, aucs, diverged=()):
    return [{"env": task, "method": method, "lag_depth": b, "seed": s, "final_eval_return": 2 * auc,
             "auc_eval_return": auc, "diverged": (b, s) in diverged}
            for b in depths for s, auc in enumerate(aucs)]


def test_the_locomotion_units_block_reads_every_finished_unit(tmp_path):
    """One row per finished study-seed unit (tuning units left out), mean ± sd of the AUC per lag depth
    with the mean final return; a diverged run is counted and left out, never averaged."""
    import json

    rd = _rebuild_docs()
    root = _tree(tmp_path, HEAD + BEGIN.format("locomotion_units") + "stale\n" + END.format("locomotion_units") + TAIL)
    loco = root / "results" / "locomotion"
    os.makedirs(loco)
    (loco / "protocol.json").write_text(json.dumps({"tasks": ["Hopper-v4", "Walker2d-v4"], "lag_depths": [1, 8, 32],
                                                    "ablations": {"tasks": ["Hopper-v4"]}}))
    units = {"study/Walker2d-v4/vaco": ("Walker2d-v4/vaco", [1, 8, 32], [100.0, 200.0, 300.0], {(8, 1)}),
             "study/Hopper-v4/ppo_clip": ("Hopper-v4/ppo_clip", [1, 8, 32], [1000.0, 3000.0], ()),
             "lag_aware/Hopper-v4/ppo_clip": ("Hopper-v4/ppo_clip/variant=lag_aware", [32], [-50.0, -150.0], ()),
             "ablation/Hopper-v4/a3po": ("Hopper-v4/a3po", [32], [10.0, 20.0], ())}
    for unit, (sub, depths, aucs, diverged) in units.items():
        task, method = unit.split("/")[1:]
        os.makedirs(loco / "study" / sub)
        results.write_table(str(loco / "study" / sub / "scores.csv"), _loco_scores(task, method, depths, aucs, diverged))
    results.write_table(str(loco / "manifest.csv"), [{"unit": "tune/ppo_clip", "runs": 18}]
                        + [{"unit": u, "runs": 1} for u in units])
    assert rd.main(["--root", str(root)]) == 0
    text = (root / "FINDINGS.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ") and "task" not in line]
    assert lines == [  # study, then lag-aware, then ablation units; tasks in the protocol's order
        "| Hopper-v4 | PPO-Clip | B = 1 tuning | 6 | 2,000 ± 1,414 (4,000) | 2,000 ± 1,414 (4,000) | 2,000 ± 1,414 (4,000) |",
        "| Walker2d-v4 | VACO | B = 1 tuning | 9 | 200 ± 100 (400) | 200 ± 141 (400); 1 of 3 diverged | 200 ± 100 (400) |",
        "| Hopper-v4 | PPO-Clip | lag-aware tuning | 2 | — | — | −100 ± 71 (−200) |",
        "| Hopper-v4 | A-3PO | parent's B = 1 tuning | 2 | — | — | 15 ± 7 (30) |"]
    assert "stale" not in text and (root / "FINDINGS.md").read_bytes().endswith(TAIL.encode())
    rows = results.read_table(str(loco / "study" / "Hopper-v4" / "a3po" / "scores.csv"))
    rows[0]["auc_eval_return"] = 40.0  # the committed per-run scores changed: the block is out of date
    results.write_table(str(loco / "study" / "Hopper-v4" / "a3po" / "scores.csv"), rows)
    assert rd.main(["--root", str(root), "--check"]) == 1


def _real_run(where, seed, auc, sps, age, diverged=False):
    """A real run's record as run_real writes it: a third evaluation after the simulator's last (two
    chunks) whose number must be left out, and a score.json whose own scores counted it."""
    os.makedirs(where)
    first, second = (auc - 100.0, float("nan") if diverged else auc + 100.0)
    results.write_table(str(where / "curve.csv"), [{"update": u, "env_steps": 128 * u, "eval_return": r}
                                                    for u, r in ((2, first), (4, second), (5, 1e6))])
    results.write_json(str(where / "score.json"), {"final_eval_return": 1e6, "auc_eval_return": 1e6, "diverged": False,
                                                   "env_steps_per_second": sps, "mean_age": age, "seed": seed})


def test_the_sim_vs_real_block_reads_the_real_runs_then_the_verdicts(tmp_path):
    """The real runs' table comes first (speed as a multiple of the lockstep configuration's; scores at
    the simulator's evaluation points); the verdicts join it once `report` has written verdicts.csv."""
    import json

    rd = _rebuild_docs()
    root = _tree(tmp_path, HEAD + BEGIN.format("sim_vs_real") + END.format("sim_vs_real") + TAIL)
    real = root / "results" / "sim_vs_real" / "real"
    os.makedirs(real)
    (real.parent / "protocol.json").write_text(json.dumps({"preset": {"num_evals": 2, "task": "Hopper-v4"},
                                                         "configurations": [{"name": "sync4"}, {"name": "async2"}]}))
    runs = {("async2", "vaco"): [(0, 300.0, 6000.0, 1.0), (1, 500.0, 6000.0, 1.5), (2, 9e3, 6000.0, 1.0, True)],
            ("sync4", "vaco"): [(0, 1000.0, 3000.0, 0.0), (1, 1200.0, 3000.0, 0.0)]}
    for (config, method), scores in runs.items():
        for seed, *rest in scores:
            _real_run(real / config / method / f"seed{seed}", seed, *rest)
    assert rd.main(["--root", str(root)]) == 0
    text = (root / "FINDINGS.md").read_text()
    assert "| sync4 | VACO | 2 | 0.00 | 3,000 | 1.00× | 1,100 ± 141 | 1,200 ± 141 |" in text
    assert "| async2 | VACO | 3 (1 diverged) | 1.17 | 6,000 | 2.00× | 400 ± 141 | 500 ± 141 |" in text
    results.atomic_copy(str(real / "sync4" / "vaco" / "seed0" / "curve.csv"),  # a table with its checksum
                        str(real / "sync4" / "vaco" / "seed1" / "curve.csv"))
    assert rd.main(["--root", str(root), "--check"]) == 1  # a changed real curve: the block is out of date
    assert "No verdict yet" in text
    verdict = {"configuration": "async2", "method": "vaco", "variant": "histogram", "margin": 0.15, "sim_mean": 420.0,
               "scaled_difference": 0.018, "low": -0.05, "high": 0.08, "verdict": "predicts", "sim_mean_age": 1.2,
               "sim_realised_mean_age": 1.17}
    results.write_table(str(root / "results" / "sim_vs_real" / "verdicts.csv"),
                        [dict(verdict, score="auc_eval_return"),
                         dict(verdict, score="final_eval_return", low=0.2, high=0.3, verdict="differs")])
    assert rd.main(["--root", str(root), "--check"]) == 1  # the verdicts are new: the block is out of date
    assert rd.main(["--root", str(root)]) == 0
    text = (root / "FINDINGS.md").read_text()
    assert "No verdict yet" not in text
    assert rd.sim_vs_real_findings.sim_vs_real_summary(str(root)) == (
        "- **The sim-vs-real study** (`results/sim_vs_real/`, Hopper-v4, 5 real runs): verdicts over the 2 "
        "asynchronous (configuration, method, score) rows — histogram: 1 predicts, 1 differs, 0 inconclusive. The "
        "control must be called *differs*; *inconclusive* means the interval is wider than the margin.")
    assert ("| async2 | VACO | histogram | 1.20 / 1.17 | 420: +0.018 [−0.050, +0.080] predicts | "
            "420: +0.018 [+0.200, +0.300] differs |") in text


def test_the_locomotion_verdicts_block_and_summary_line_read_verdicts_csv(tmp_path):
    """The verdicts report wrote are the block's and the first screen's: the primary family with Holm's p and
    each verdict's stability, every method's retention, the exploratory rows; a changed verdict makes the
    docs out of date."""
    import json

    study = study_module("locomotion_report")
    rd = _rebuild_docs()
    blocks = BEGIN.format("summary") + END.format("summary") + BEGIN.format("locomotion_verdicts") + "stale\n" \
        + END.format("locomotion_verdicts")
    root = _tree(tmp_path, HEAD + blocks + TAIL)
    loco = root / "results" / "locomotion"
    os.makedirs(loco)
    p = json.load(open(os.path.join(REPO, "results", "locomotion", "protocol.json")))
    p["rules"]["bootstrap"].update(replicates=200, stability_seeds=[1, 2])
    (loco / "protocol.json").write_text(json.dumps(p))
    for task in ("Hopper-v4", "HalfCheetah-v4"):
        for m, level in (("ppo_clip", 500.0), ("ppo_kl", 500.0), ("spo", 500.0), ("vaco", 900.0)):
            d = loco / "study" / task / m
            os.makedirs(d)
            results.write_table(str(d / "scores.csv"), [
                {"env": task, "method": m, "lag_depth": b, "seed": s, "diverged": False,
                 "auc_eval_return": (1000.0 if b == 1 else level) + 10 * s, "final_eval_return": 1000.0 + 10 * s,
                 "mean_filtered_fraction": 0.01 * b, "mean_clip_fraction": 0.01 * b}
                for b in (1, 8, 32) for s in range(5)])
            results.write_cells(str(d), [{"lag_depth": b, "seed": s} for b in (1, 8, 32) for s in range(5)])
    results.write_json(str(loco / "study" / "random_scores.json"), {"Hopper-v4": 0.0, "HalfCheetah-v4": -100.0})
    results.write_table(str(loco / "verdicts.csv"), study.verdicts(p, str(loco)))
    assert rd.main(["--root", str(root)]) == 0
    text = (root / "FINDINGS.md").read_text()
    assert "stale" not in text
    # VACO wins every run at B > 1; with no lag-aware unit a method's lag-aware row reads its one setting
    assert "| PPO-Clip | B = 1 | 8 | 1.00 [1.00, 1.00] | 0.0448 | holds | 1.00 | Hopper-v4 HalfCheetah-v4 |" in text
    assert "| SPO | lag-aware | 32 | 1.00 [1.00, 1.00] | 0.0448 | holds | 1.00 | Hopper-v4 HalfCheetah-v4 |" in text
    assert "Holm over 9): 9 holds (`results/locomotion/verdicts.csv`)" in text
    # retention on the normalised AUC; both tasks are at their ceiling on the final return (every method ends
    # level there), so the final-return comparisons leave them out and have no task left
    assert "| VACO | 0.91 [0.90, 0.92] | 0.91 [0.90, 0.92] | — | — |" in text
    assert "| 6 | retention vaco - spo | final return | 32 | — | no data | — | — |" in text
    assert "| 5 | P(vaco > vaco_realign_only) | AUC | 32 | — | no data | — | — |" in text  # no ablation runs
    assert "Hopper-v4: at ceiling" in text and "0 of 120 runs diverged (left out)." in text
    rows = results.read_table(str(loco / "verdicts.csv"))
    rows[0]["verdict"] = "fails"
    results.write_table(str(loco / "verdicts.csv"), rows)
    assert rd.main(["--root", str(root), "--check"]) == 1


def test_the_locomotion_diagnostics_block_averages_each_task_once(tmp_path):
    """Per method, tuning and B: a diagnostic's mean over each task's runs, then over the tasks (a task
    with more runs does not weigh more); a diverged run is left out; a column a method lacks is "—"."""
    rd = _rebuild_docs()
    root = _tree(tmp_path, HEAD + BEGIN.format("locomotion_diagnostics") + END.format("locomotion_diagnostics") + TAIL)
    loco = root / "results" / "locomotion"
    runs = {"study/Hopper-v4/vaco": [0.1, 0.1, 0.1, 5.0], "study/Walker2d-v4/vaco": [0.3],
            "lag_aware/Hopper-v4/vaco": [0.7]}
    for unit, fractions in runs.items():
        stage, task, method = unit.split("/")
        d = loco / "study" / task / method / ("variant=lag_aware" if stage == "lag_aware" else "")
        os.makedirs(d, exist_ok=True)
        results.write_table(str(d / "scores.csv"), [
            {"env": task, "method": method, "lag_depth": 32, "seed": s, "diverged": f == 5.0, "auc_eval_return": 1.0,
             "final_eval_return": 1.0, "mean_filtered_fraction": f, "mean_tv_behaviour": 2 * f}
            for s, f in enumerate(fractions)])
    results.write_table(str(loco / "manifest.csv"), [{"unit": u} for u in runs])
    assert rd.main(["--root", str(root)]) == 0
    lines = [line for line in (root / "FINDINGS.md").read_text().splitlines() if line.startswith("| VACO")]
    assert lines == ["| VACO | B = 1 tuning | 32 | 2 | — | 0.400 | — | 0.200 | — | — |",
                     "| VACO | lag-aware tuning | 32 | 1 | — | 1.400 | — | 0.700 | — | — |"]
