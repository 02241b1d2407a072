"""Every number on the README's first screen ("What was found") is its committed table's: each bullet names
the table it comes from, the test recomputes the bullet's numbers from that table (read with the
project's readers) and finds them in the bullet's text, and what is left of the bullet after those numbers,
the task names, the lag depths and the file names holds no digit — a number added without a check here
fails."""

import os
import re

import numpy as np
import pytest

from vaco_jax.analysis import results, tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORRECTIONS = ("m2po", "tis", "mis", "gipo", "sapo", "vcpo", "impact")  # the 2025-26 staleness corrections


def _bullets(text: str) -> dict[str, str]:
    """{the results path a bullet names: the bullet, whitespace collapsed} of the "What was found" section."""
    section = text.split("## What was found\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for bullet in re.split(r"\n- ", section)[1:]:
        bullet = " ".join(bullet.split())
        (path,) = re.findall(r"`(results/[^`]+)`", bullet)  # each bullet names one table
        out[path] = bullet
    return out


def _readme_text() -> str:
    return open(os.path.join(ROOT, "README.md")).read()


def _readme_bullets() -> dict[str, str]:
    return _bullets(_readme_text())


def _checked(bullet: str, quoted: list[str]) -> str:
    """Every string of ``quoted`` is in the bullet; the bullet without them, its task and file names, its
    lag depths (B = n), "2025–26" and π_T has no digit left."""
    for q in quoted:
        assert q in bullet, f"README's first screen does not say {q!r} (from its table): {bullet}"
    rest = bullet
    for q in sorted(quoted, key=len, reverse=True):
        rest = rest.replace(q, " ")
    rest = re.sub(r"`[^`]*`|\b[A-Za-z0-9]+-v\d\b|B = \d+( and \d+)?|2025–26|π_T", " ", rest)
    assert not re.search(r"\d", rest), f"a number on README's first screen that no table backs: {rest}"
    return rest


def _ci(r: dict, sign: str = "") -> str:
    return f"{sign}{float(r['point']):.2f} [{float(r['low']):.2f}, {float(r['high']):.2f}]"


def test_the_step_size_bullet_is_stage_1s_choices():
    from vaco_jax.studies import lag_sweep_report, steplag

    bullet = _readme_bullets()["results/steplag/choices.csv"]
    rows = {r["surface"]: r for r in results.read_table(os.path.join(ROOT, steplag.RESULTS, "choices.csv"))}

    def per_lag(key):
        return {int(b): float(v) for b, v in re.findall(r"B=(\d+): ([\d.e+-]+)", rows[key]["per_lag"])}

    eps, delta = per_lag("ppo_clip"), per_lag("vaco")
    assert eps[8] == eps[32] and delta[8] == delta[32]
    assert rows["ppo_clip"]["tasks_in"] == rows["vaco"]["tasks_in"] == "Hopper-v4 Walker2d-v4"
    _checked(bullet, ["On Hopper-v4 and Walker2d-v4",
                      f"PPO-Clip's best ε is {eps[1]:g} at B = 1 and {eps[8]:g} at B = 8 and 32",
                      f"VACO's best δ is {delta[1]:g}, then {delta[8]:g}"])
    # the demo's terminal note names the same optima
    assert lag_sweep_report.TUNED_STEPS == {"ppo_clip": ("clip_epsilon", eps[1], eps[8]), "vaco": ("tv_budget", delta[1], delta[8])}


def test_the_stage_2_bullet_is_its_verdicts():
    from vaco_jax.studies import steplag

    bullet = _readme_bullets()["results/steplag/stage2_verdicts.csv"]
    rows = [r for r in results.read_table(os.path.join(ROOT, steplag.RESULTS, steplag.STAGE2_VERDICTS))
            if r["family"] == "primary"]

    def row(arm, test, lag_model, b):
        (r,) = [r for r in rows if (r["arm"], r["test"].split()[0], r["lag_model"], int(r["lag_depth"]))
                == (arm, test, lag_model, b)]
        return r

    equivalent, worse = row("vaco", "P(X", "uniform", 32), row("vaco", "P(X", "fixed", 8)
    better = row("vaco_learner", "retention", "uniform", 32)
    assert (equivalent["verdict"], worse["verdict"], better["verdict"]) == ("equivalent", "worse", "better")
    # "no method is found to score above PPO-Clip"; "one verdict is better"
    assert not [r for r in rows if r["test"].startswith("P(") and r["verdict"] == "better"]
    assert [r["verdict"] for r in rows].count("better") == 1 and all(r["reference"] == "ppo_clip" for r in rows)
    tasks = set(" ".join(r["tasks"] for r in rows).split())
    tuned = set(next(r for r in results.read_table(os.path.join(ROOT, steplag.RESULTS, "choices.csv"))
                     if r["surface"] == "vaco")["tasks_in"].split())
    assert tuned == {"Hopper-v4", "Walker2d-v4"} and tasks - tuned == {"HalfCheetah-v4", "Ant-v4"}
    _checked(bullet, ["no method is found to score above PPO-Clip", "Hopper-v4 and Walker2d-v4, which the tuning used",
                      "HalfCheetah-v4 and Ant-v4, which it did not",
                      f"equivalent to PPO-Clip at B = 32 (P(VACO > PPO-Clip) = {_ci(equivalent)})",
                      f"{int(worse['lag_depth']) - 1} versions old (fixed lag, B = 8) it is worse ({_ci(worse)})",
                      "One verdict is *better*", f"(retention {_ci(better, '+')})"])


def test_the_locomotion_bullet_is_its_verdicts():
    bullet = _readme_bullets()["results/locomotion/verdicts.csv"]
    (r,) = [r for r in results.read_table(os.path.join(ROOT, "results", "locomotion", "verdicts.csv"))
            if r["comparison"] == "P(vaco > ppo_clip)" and r["score"] == "auc_eval_return" and r["tuning"] == "B1"
            and int(r["lag_depth"]) == 1]
    assert r["verdict"] == "fails"
    _checked(bullet, [f"already at B = 1** (P(VACO > PPO-Clip) = {_ci(r)};"])


def _best_at(p: dict, key: str, lag_depth: int) -> float:
    """A Hopper-v4 surface's best mean AUC at ``lag_depth`` over stage 1's own seeds, diverged runs left out."""
    from vaco_jax.studies import steplag, steplag_stage1

    rows = steplag_stage1.surface_rows(p, os.path.join(ROOT, steplag.RESULTS), "Hopper-v4", key,
                                       steplag_stage1.reuse_state(p, os.path.join(ROOT, steplag.RESULTS)),
                                       base_only=True)
    by_value: dict = {}
    for r in rows:
        if int(r["lag_depth"]) == lag_depth and not tables.is_diverged(r):
            by_value.setdefault(r["value"], []).append(float(r["auc_eval_return"]))
    return max(float(np.mean(v)) for v in by_value.values())


def test_the_corrections_bullet_is_their_hopper_surfaces():
    import json
    from vaco_jax.studies import steplag

    bullet = _readme_bullets()["results/steplag/surface/"]
    p = json.load(open(os.path.join(ROOT, steplag.PROTOCOL)))
    surfaces = p["stage1"]["surfaces"]
    assert set(CORRECTIONS) == {k for k, s in surfaces.items() if s["tasks"] == ["Hopper-v4"]}
    best = {key: _best_at(p, key, 32) for key in CORRECTIONS + ("ppo_clip",)}
    ranked = sorted(CORRECTIONS, key=best.get)
    assert best["ppo_clip"] > best[ranked[-1]] and (ranked[0], ranked[-1]) == ("impact", "m2po")
    _checked(bullet, [f"best of them, M2PO, scores {best['m2po']:,.0f}",
                      f"the lowest, IMPACT, {best['impact']:,.0f}",
                      f"against PPO-Clip's {best['ppo_clip']:,.0f}",
                      f"mean AUC of {len(p['stage1']['seeds'])} seeds"])


def test_the_deep_lag_bullet_is_its_verdicts():
    bullet = _readme_bullets()["results/deep_lag/verdicts.csv"]
    rows = results.read_table(os.path.join(ROOT, "results", "deep_lag", "verdicts.csv"))

    def row(configuration, method, variant):
        (r,) = [r for r in rows if (r["quantity"], r["configuration"], r["method"], r["variant"])
                == ("retention", configuration, method, variant)]
        return r

    deep = [row("age16", m, "histogram") for m in ("ppo_clip", "vaco")]
    older = [row("age16", m, "control") for m in ("ppo_clip", "vaco")]
    publish = row("age4", "ppo_clip", "histogram")
    assert all(r["verdict"] == "predicts" for r in deep + older) and publish["verdict"] == "inconclusive"
    (margin,) = {float(r["margin"]) for r in rows}
    (shift,) = {round(float(r["sim_mean_age"]) - float(r["real_mean_age"])) for r in older}
    _checked(bullet, [f"of {float(deep[0]['real_mean_age']):.0f} the simulator predicts both methods' retention",
                      f"within the ±{margin:.2f} margin", f"but so does a lag {shift} versions older",
                      f"At a mean age of {float(publish['real_mean_age']):.1f}",
                      f"keeps {float(publish['real']):.2f} of its score and the simulated one "
                      f"{float(publish['sim']):.2f}, which the rule calls inconclusive"])


def test_every_bullet_names_a_table_this_file_checks():
    checked = {"results/steplag/choices.csv", "results/steplag/stage2_verdicts.csv", "results/locomotion/verdicts.csv",
               "results/steplag/surface/", "results/deep_lag/verdicts.csv"}
    assert set(_readme_bullets()) == checked


CHECKS = {"choices": test_the_step_size_bullet_is_stage_1s_choices, "stage2": test_the_stage_2_bullet_is_its_verdicts,
          "locomotion": test_the_locomotion_bullet_is_its_verdicts,
          "surface": test_the_corrections_bullet_is_their_hopper_surfaces,
          "deep_lag": test_the_deep_lag_bullet_is_its_verdicts}


@pytest.mark.parametrize("check, old, new", [
    ("choices", "best δ is 0.06", "best δ is 0.6"),  # a number unlike its table's
    ("stage2", "0.59 [0.50, 0.68]", "0.61 [0.50, 0.68]"),
    ("stage2", "(fixed lag, B = 8)", "(fixed lag, B = 8, 10 seeds)"),  # a number no table backs
    ("locomotion", "0.27 [0.14, 0.40]", "0.27 [0.14, 0.41]"),
    ("surface", "1,403", "1,430"),
    ("deep_lag", "mean age of 4.7", "mean age of 4.8"),
    ("deep_lag", "0.44 of its score", "0.44 of its score (of 2 runs)"),
])
def test_a_number_unlike_its_table_or_backed_by_none_fails(monkeypatch, check, old, new):
    text = _readme_text()
    assert old in text
    monkeypatch.setattr(__import__(__name__), "_readme_text", lambda: text.replace(old, new))
    with pytest.raises(AssertionError):
        CHECKS[check]()


def test_the_first_screen_says_what_it_is_how_to_run_it_and_what_was_found():
    """README.md stays at most 150 lines; before its findings it says what VACO and the lag depth B are and
    how to run the main job and the tests, and the findings end within the first screen (~50 lines)."""
    lines = _readme_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the detail belongs in FINDINGS.md or docs/"
    at = {heading: lines.index(heading) for heading in ("## Run it (Python 3.11 or 3.12, 2 CPU cores)",
                                                         "## What was found")}
    before = "\n".join(lines[:at["## What was found"]])
    assert "**The lag depth B.**" in before and "**VACO**" in before
    assert "make demo" in before and "make test " in before
    end = next(i for i in range(at["## What was found"] + 1, len(lines)) if lines[i].startswith("## "))
    assert end <= 50, f"README's findings end at line {end}: keep them to a few short bullets"


def test_the_demo_says_its_step_sizes_are_untuned_and_its_iqm_of_three_is_a_mean():
    """The demo's terminal output reads against the findings only with its reason: at the default step sizes
    it prints a line saying they are not tuned for the lag; a step size given or swept leaves the line
    out. Its headline calls an IQM that cuts no run (fewer than 4 pooled) the mean."""
    from vaco_jax.studies import lag_sweep, lag_sweep_report

    def note(**flags):
        args = lag_sweep.Args(**flags)
        return lag_sweep_report.untuned_note(lag_sweep.plan(args, lag_sweep.resolve(args)))

    line = note()
    assert "not tuned for the lag" in line and "clip_epsilon = 0.2 (best at B = 1: 0.2; under lag: 0.6)" in line
    assert "tv_budget = 0.2 (best at B = 1: 0.06; under lag: 0.2)" in line
    assert note(clip_epsilon=0.6) == note(sweep=("tv_budget=0.1,0.2",)) == note(methods=("ppo_clip",)) == ""
    row = {"aggregate": "iqm", "n_tasks": 1}
    assert lag_sweep_report.central_label([{**row, "n_runs": 3}]) == "mean of 3 runs"
    assert lag_sweep_report.central_label([{**row, "n_runs": 3}, {**row, "n_runs": 4}]) == "IQM"
    summary = results.read_table(os.path.join(ROOT, "results", "demo", "summary.csv"))
    assert lag_sweep_report.headline(summary).endswith("(mean of 3 runs, 95% CI).")
