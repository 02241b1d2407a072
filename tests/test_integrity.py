"""Trustworthy results: the results layer (checksums, row counts, clear errors), fault injection on
every kind of file of a run directory, run identity, bad input before anything is written, exit
codes, and analysis that imports no jax. Training runs on the tiny pure-JAX point_mass task."""

import json
import hashlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import FAST_COMPILE, tiny_config, study_module
from vaco_jax.analysis import results
from vaco_jax.driver import grid, provenance, runner
from vaco_jax.core.config import ConfigError
from vaco_jax.analysis.results import ResultsError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = [{"env": "point_mass", "lag_depth": 1, "seed": 0, "x": 0.5, "ok": True, "name": "a"},
        {"env": "point_mass", "lag_depth": 4, "seed": 1, "x": float("nan"), "ok": False, "name": "7"}]


# ----------------------------------------------------------------------------- the results layer

def test_a_table_round_trips_with_one_type_per_column(tmp_path):
    path = str(tmp_path / "t.csv")
    results.write_table(path, ROWS)
    back = results.read_table(path, expect_rows=2)
    assert back[0]["lag_depth"] == 1 and back[1]["x"] != back[1]["x"] and back[0]["ok"] is True
    assert back[1]["name"] == "7" and isinstance(back[1]["name"], str)  # a str column stays str
    frame = results.read_frame(path)
    assert list(frame["lag_depth"]) == [1, 4]


@pytest.mark.parametrize("damage, message", [
    (lambda t: t.replace("0.5", "0.6"), "checksum mismatch"),
    (lambda t: t[: t.rindex("\n", 0, len(t) - 1) + 1], "checksum mismatch"),  # a row cut at a line boundary
    (lambda t: t[: len(t) // 2], "checksum mismatch"),  # cut mid-line
    (lambda t: "", "checksum mismatch"),  # empty
])
@pytest.mark.parametrize("old_format", [False, True])
def test_a_damaged_table_is_named_with_what_is_wrong(tmp_path, damage, message, old_format):
    path = str(tmp_path / "scores.csv")
    _write(path, ROWS, old_format)
    text = open(path).read()
    if old_format:  # damage the body, keep the footer line
        body, footer = text[: text.index(results.FOOTER)], text[text.index(results.FOOTER):]
        damaged = damage(body) + footer
    else:
        damaged = damage(text)
    open(path, "w").write(damaged)
    if old_format:  # a body cut mid-line swallows the footer into its last line: then no checksum is found
        message = f"({message}|no checksum)"
    with pytest.raises(ResultsError, match=f"scores.csv: {message}"):
        results.read_table(path)


def _write(path, rows, old_format):
    """A table as this version writes it, or as versions before the checksum sidecar did (its checksum in a
    footer line): both must stay readable."""
    results.write_table(path, rows)
    if old_format:
        body = open(path).read()
        os.remove(path + results.CHECKSUM_SUFFIX)
        open(path, "w").write(body + f"{results.FOOTER} rows={len(rows)} sha256={hashlib.sha256(body.encode()).hexdigest()}\n")


def test_a_table_reads_with_plain_pandas_and_its_checksum_lives_beside_it(tmp_path):
    import pandas as pd

    path = str(tmp_path / "scores.csv")
    rows = [{"env": "Hopper-v4", "lag_depth": b, "seed": s, "final_eval_return": 1.5 * b + s, "diverged": False}
            for b in (1, 8) for s in (0, 1)]
    results.write_table(path, rows)
    frame = pd.read_csv(path)  # no argument: what every researcher does with a results file first
    assert len(frame) == 4 and frame["lag_depth"].dtype.kind == "i" and frame["seed"].dtype.kind == "i"
    assert frame["final_eval_return"].dtype.kind == "f" and frame["diverged"].dtype.kind == "b"
    assert os.path.exists(path + ".sha256") and "rows=4 sha256=" in open(path + ".sha256").read()
    os.remove(path + ".sha256")
    with pytest.raises(ResultsError, match=r"scores.csv: no checksum \(scores.csv.sha256 is missing"):
        results.read_table(path)


def test_a_table_in_the_old_format_reads_and_copies_with_its_footer(tmp_path):
    old, new = str(tmp_path / "old.csv"), str(tmp_path / "new.csv")
    _write(old, ROWS, old_format=True)
    assert str(results.read_table(old)) == str(results.read_table(str(_fresh(tmp_path))))  # (str: NaN != NaN)
    results.write_table(new, ROWS)
    results.atomic_copy(old, new)  # an old table copied over a new one: its own footer rules, no stale sidecar
    assert not os.path.exists(new + ".sha256") and results.read_table(new)[0]["lag_depth"] == 1
    results.atomic_copy(str(_fresh(tmp_path)), new)  # and a new one carries its sidecar along
    assert os.path.exists(new + ".sha256") and len(results.read_table(new)) == 2


def _fresh(tmp_path):
    path = tmp_path / "fresh.csv"
    results.write_table(str(path), ROWS)
    return path


def test_row_counts_are_checked_against_the_manifest(tmp_path):
    path = str(tmp_path / "scores.csv")
    results.write_table(path, ROWS)
    with pytest.raises(ResultsError, match="2 rows, expected 3"):
        results.read_table(path, expect_rows=3)
    results.write_cells(str(tmp_path), [{"lag_depth": 1, "seed": s} for s in range(3)])
    with pytest.raises(ResultsError, match="expected 3"):
        results.load_scores(str(tmp_path))


def test_json_and_arrays_carry_checksums(tmp_path):
    jpath, npath = str(tmp_path / "a.json"), str(tmp_path / "a.npz")
    results.write_json(jpath, {"a": 1.0, "b": float("nan")})
    assert json.load(open(jpath))["b"] is None  # valid JSON: NaN is written as null
    assert results.read_json(jpath) == {"a": 1.0, "b": None}
    text = open(jpath).read()
    open(jpath, "w").write(text.replace("1.0", "2.0"))
    with pytest.raises(ResultsError, match="a.json: checksum mismatch"):
        results.read_json(jpath)
    open(jpath, "w").write(text[:10])
    with pytest.raises(ResultsError, match="not valid JSON"):
        results.read_json(jpath)
    results.save_npz(npath, returns=np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(results.load_npz(npath)["returns"], np.arange(6.0).reshape(2, 3))
    data = bytearray(open(npath, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(npath, "wb").write(bytes(data))
    with pytest.raises(ResultsError, match="a.npz"):
        results.load_npz(npath)
    with pytest.raises(ResultsError, match="missing"):
        results.load_npz(str(tmp_path / "gone.npz"))


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = str(tmp_path / "t.csv")
    results.write_table(path, ROWS)
    before = open(path).read()

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        results.write_table(path, ROWS[:1])
    assert open(path).read() == before and len(results.read_table(path)) == 2  # the old table, still verified
    assert sorted(os.listdir(tmp_path)) == ["t.csv", "t.csv.sha256"]
    # a copy into results (a study's tables) is the same kind of write
    src = tmp_path / "src.bin"
    src.write_bytes(b"new")
    with pytest.raises(OSError, match="No space"):
        results.atomic_copy(str(src), path)
    assert open(path).read() == before and sorted(os.listdir(tmp_path)) == ["src.bin", "t.csv", "t.csv.sha256"]
    monkeypatch.undo()
    results.atomic_copy(str(src), path)
    assert open(path, "rb").read() == b"new" and not os.path.exists(path + ".sha256")


def test_reading_results_imports_no_jax():
    code = ("import sys, vaco_jax, vaco_jax.analysis.results, vaco_jax.analysis.stats, vaco_jax.analysis.tables, "
            "vaco_jax.analysis.figures, vaco_jax.analysis.rules, vaco_jax.analysis.claims, vaco_jax.core.presets;"
            "print(sorted(m for m in ('jax', 'flax', 'optax', 'brax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- a group under damage

CONFIG = dict(num_evals=3, total_env_steps=8 * 16 * 6)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted group: the reference every damaged-and-resumed run must reproduce exactly."""
    d = str(tmp_path_factory.mktemp("straight") / "g")
    rows = runner.run_group(tiny_config(**CONFIG), grid.grid([1, 4], [0]), d, progress=False)
    return rows


def _interrupted(tmp_path, chunks=2):
    d = str(tmp_path / "g")
    assert runner.run_group(tiny_config(**CONFIG), grid.grid([1, 4], [0]), d, progress=False,
                           max_chunks=chunks) is None
    return d


def _same(a, b):
    assert len(a) == len(b)
    for r1, r2 in zip(a, b):
        for k in ("final_eval_return", "auc_eval_return", "train_return_last5pct", "mean_clip_fraction"):
            assert r1[k] == r2[k] or (np.isnan(r1[k]) and np.isnan(r2[k])), k


def _flip(path, n=64):
    data = bytearray(open(path, "rb").read())
    mid = len(data) // 2
    for i in range(mid, min(mid + n, len(data))):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _largest_array_file(step_dir):
    files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(step_dir, "state")) for f in fs]
    return max(files, key=os.path.getsize)


def _damage_arrays(step_dir):
    """Flip every byte of every array data file (a few flipped bytes may land where no restore reads)."""
    for r, _, fs in os.walk(os.path.join(step_dir, "state")):
        if os.path.basename(r) == "d":
            for f in fs:
                path = os.path.join(r, f)
                open(path, "wb").write(bytes(b ^ 0xFF for b in open(path, "rb").read()))


@pytest.mark.parametrize("damage", ["delete_curves", "cut_curves", "delete_phase_returns", "flip_checkpoint",
                                    "flip_both_checkpoints", "truncate_checkpoint"])
def test_damage_to_any_file_is_detected_and_the_numbers_come_out_the_same(tmp_path, straight, damage, capsys):
    d = _interrupted(tmp_path)
    ckpt = os.path.join(d, "checkpoint")
    assert sorted(os.listdir(ckpt)) == ["1", "2"]  # the newest checkpoint and a fallback
    if damage == "delete_curves":
        os.remove(os.path.join(d, "curves.csv"))
    elif damage == "cut_curves":  # a whole chunk's rows cut away at a line boundary
        text = open(os.path.join(d, "curves.csv")).read().splitlines(keepends=True)
        open(os.path.join(d, "curves.csv"), "w").write("".join(text[:-3]) + text[-1])
    elif damage == "delete_phase_returns":
        os.remove(os.path.join(d, "phase_returns.npz"))
    elif damage == "flip_checkpoint":  # 64 flipped bytes: caught by the checksums or harmless
        _flip(_largest_array_file(os.path.join(ckpt, "2")))
    elif damage == "flip_both_checkpoints":
        _damage_arrays(os.path.join(ckpt, "2"))
        _damage_arrays(os.path.join(ckpt, "1"))
    elif damage == "truncate_checkpoint":
        f = _largest_array_file(os.path.join(ckpt, "2"))
        open(f, "r+b").truncate(os.path.getsize(f) // 2)
    resumed = runner.run_group(tiny_config(**CONFIG), grid.grid([1, 4], [0]), d, progress=False)
    _same(resumed, straight)
    err = capsys.readouterr().err
    if damage != "flip_checkpoint" and damage != "truncate_checkpoint":
        assert "warning:" in err and "restarting" in err  # recomputed from the start, and said so
    assert not any(".tmp." in f for f in os.listdir(d))


def test_a_damaged_finished_table_is_an_error_never_a_smaller_sample(tmp_path):
    d = str(tmp_path / "g")
    shutil.copytree(os.path.dirname(os.path.join(_finished(tmp_path), "scores.csv")), d)
    text = open(os.path.join(d, "scores.csv")).read().splitlines(keepends=True)
    open(os.path.join(d, "scores.csv"), "w").write("".join(text[:-2]) + text[-1])  # one row fewer
    with pytest.raises(ResultsError, match="scores.csv"):
        runner.run_group(tiny_config(**CONFIG), grid.grid([1, 4], [0]), d, progress=False)
    with pytest.raises(ResultsError, match="scores.csv"):
        results.load_scores(str(tmp_path / "g"))


def _finished(tmp_path):
    d = str(tmp_path / "finished")
    runner.run_group(tiny_config(**CONFIG), grid.grid([1, 4], [0]), d, progress=False)
    return d


def test_duplicate_or_no_cells_are_refused_before_anything_is_written(tmp_path):
    d = str(tmp_path / "g")
    with pytest.raises(ConfigError, match="appears twice"):
        runner.run_group(tiny_config(), grid.grid([1], [0, 0]), d, progress=False)
    with pytest.raises(ConfigError, match="no cells"):
        runner.run_group(tiny_config(), [], d, progress=False)
    assert not os.path.exists(d)


# ----------------------------------------------------------------------------- identity and the CLI

def test_run_identity_ignores_display_settings_and_names_a_real_difference(tmp_path):
    run = str(tmp_path)
    groups = [grid.Group(tiny_config(), (), "t/ppo_clip")]
    provenance.write_run_metadata(run, groups, {"progress": True, "bootstrap_reps": 2000})
    provenance.write_run_metadata(run, groups, {"progress": False, "bootstrap_reps": 10})  # display only: fine
    moved = str(tmp_path / "moved")
    shutil.copytree(run, moved)
    provenance.write_run_metadata(moved, groups, {})  # a moved directory resumes
    more = groups + [grid.Group(tiny_config(method="vaco"), (), "t/vaco")]
    provenance.write_run_metadata(run, more, {})  # a new group extends the identity
    assert set(results.read_json(os.path.join(run, "run.json"))["identity"]) == {"t/ppo_clip", "t/vaco"}
    with pytest.raises(ConfigError, match="t/ppo_clip with other settings.*gamma"):
        provenance.write_run_metadata(run, [grid.Group(tiny_config(gamma=0.9), (), "t/ppo_clip")], {})


def test_a_run_recorded_before_minibatch_shuffle_existed_resumes_only_with_the_old_shuffle(tmp_path):
    """A run.json written before the ``minibatch_shuffle`` setting existed was trained with
    ``jax.random.permutation`` ('sort'): resuming it under the new default is refused, naming the
    setting; with ``minibatch_shuffle='sort'`` it resumes."""
    run = str(tmp_path)
    provenance.write_run_metadata(run, [grid.Group(tiny_config(minibatch_shuffle="sort"), (), "t/ppo_clip")], {})
    path = os.path.join(run, "run.json")
    meta = results.read_json(path)
    del meta["identity"]["t/ppo_clip"]["minibatch_shuffle"]  # as recorded before the field existed
    results.write_json(path, meta)
    with pytest.raises(ConfigError, match="minibatch_shuffle: 'sort' there, 'rank' now"):
        provenance.write_run_metadata(run, [grid.Group(tiny_config(), (), "t/ppo_clip")], {})
    provenance.write_run_metadata(run, [grid.Group(tiny_config(minibatch_shuffle="sort"), (), "t/ppo_clip")], {})


def test_two_processes_starting_at_once_both_enter_run_json(tmp_path, monkeypatch):
    """study.py --methods lets two processes share one run directory; each records its groups in
    ``run.json`` by a read-modify-write. Writes are slowed here so the two overlap: without the
    directory lock both read "no run.json yet" and the second write drops the first's group."""
    import threading
    import time

    run = str(tmp_path)
    slow_write = results.write_json

    def write_json(path, value):
        time.sleep(0.3)  # the window in which the other writer reads
        slow_write(path, value)

    monkeypatch.setattr(results, "write_json", write_json)
    start = threading.Barrier(2)
    errors = []

    def record(method):
        try:
            start.wait()
            provenance.write_run_metadata(run, [grid.Group(tiny_config(method=method), (), f"t/{method}")], {})
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=record, args=(m,)) for m in ("ppo_clip", "vaco")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert set(results.read_json(os.path.join(run, "run.json"))["identity"]) == {"t/ppo_clip", "t/vaco"}
    assert sorted(os.listdir(run)) == ["run.json"]  # the lock leaves no file behind


def _lag_sweep():
    return study_module("lag_sweep")


@pytest.mark.parametrize("flags, match", [
    (dict(learning_rate=float("nan")), "learning_rate=nan"),
    (dict(learning_rate=float("inf")), "learning_rate=inf"),
    (dict(learning_rate=-1.0), "learning_rate=-1"),
    (dict(clip_epsilon=0.0), "clip_epsilon=0"),
    (dict(seeds=()), "seeds"),
    (dict(seeds=(0, 0)), "duplicates"),
    (dict(lag_depths=()), "lag_depths"),
    (dict(methods=()), "methods"),
    (dict(lag_model="synchronous"), "synchronous"),
    (dict(bootstrap_reps=0), "bootstrap_reps"),
    (dict(sweep=("gamma=2",)), "gamma"),
])
def test_the_lag_sweep_checks_every_setting_before_writing_anything(tmp_path, flags, match):
    ls = _lag_sweep()
    out = str(tmp_path / "run")
    with pytest.raises(ConfigError, match=match):
        ls.main(ls.Args(preset="tiny", out=out, progress=False, figures=False, **flags))
    assert not os.path.exists(out)


def test_a_summary_where_every_run_of_a_cell_diverged_says_so(tmp_path, capsys):
    from vaco_jax.analysis import tables
    rows = [{"env": "point_mass", "method": m, "lag_depth": b, "seed": s, "final_eval_return": 10.0 + s,
             "auc_eval_return": 5.0, "train_return_last5pct": 1.0, "diverged": m == "vaco" and b == 4}
            for m in ("ppo_clip", "vaco") for b in (1, 4) for s in range(3)]
    for r in rows:
        if r["diverged"]:
            r["final_eval_return"] = float("nan")
    g = tmp_path / "g"
    g.mkdir()
    results.write_table(str(g / "scores.csv"), rows)
    results.write_cells(str(g), [{"i": i} for i in range(len(rows))])
    summary, _ = tables.summarise(str(tmp_path), reps=50)
    _lag_sweep().print_table(summary)
    out = capsys.readouterr().out
    assert "every run diverged" in out and "vaco B=4 (3)" in out


def test_train_cli_checks_its_output_path_first_and_exits_4_on_divergence(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    base = [sys.executable, "-m", "vaco_jax", "train", "--env", "point_mass", "--num-envs", "8", "--unroll-length",
            "16", "--total-env-steps", "256", "--num-evals", "2", "--eval-episodes", "0", "--episode-length", "30",
            "--num-minibatches", "2", "--num-epochs", "1", "--no-progress"]
    res = subprocess.run(base + ["--out", str(afile)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 2 and "is a file" in res.stderr and "Traceback" not in res.stderr
    out = tmp_path / "out"
    res = subprocess.run(base + ["--out", str(out), "--learning-rate", "1e30", "--max-grad-norm", "inf"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 4, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    (run_dir,) = os.listdir(out)  # a single run is a one-cell group in its own run directory
    (group,) = (out / run_dir / "point_mass").iterdir()
    assert (out / run_dir / "run.json").exists() and not (group / "checkpoint").exists()
    (row,) = results.read_table(str(group / "scores.csv"))
    assert row["diverged"] is True
    assert "DIVERGED" in res.stdout


def test_train_run_resumes_from_its_checkpoint_bit_for_bit(tmp_path, monkeypatch):
    from vaco_jax.driver import checkpoint as ckpt
    from vaco_jax.driver.train import run

    config = tiny_config(**CONFIG).replace(lag_depth=2)
    straight = run(config, seed=3, out=str(tmp_path / "a"), progress=False)
    real = ckpt.save_checkpoint
    calls = []

    def save_then_die(directory, state, chunk, extra=None):
        real(directory, state, chunk, extra)
        calls.append(chunk)
        if len(calls) == 1:
            raise KeyboardInterrupt("interrupted after the first chunk")

    monkeypatch.setattr(ckpt, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        run(config, seed=3, out=str(tmp_path / "b"), progress=False)
    resumed = run(config, seed=3, out=str(tmp_path / "b"), progress=False)
    assert calls == [1, 2, 3] and len(resumed.curves) == len(straight.curves) == 3
    assert os.path.basename(resumed.run_dir) == os.path.basename(straight.run_dir)
    for a, b in zip(resumed.curves, straight.curves):
        for k in ("train_return", "policy_loss", "eval_return"):
            assert a[k] == b[k] or (np.isnan(a[k]) and np.isnan(b[k])), k
    assert resumed.scores.keys() == straight.scores.keys()
    for k, v in straight.scores.items():
        assert resumed.scores[k] == v or (isinstance(v, float) and np.isnan(v) and np.isnan(resumed.scores[k])), k


def test_adding_seeds_later_extends_a_group_and_reruns_nothing(tmp_path):
    d = str(tmp_path / "run" / "g")
    config = tiny_config()
    first = runner.run_group(config, grid.grid([1], [0]), d, progress=False)
    mtime = os.path.getmtime(os.path.join(d, "scores.csv"))
    both = runner.run_group(config, grid.grid([1], [0, 1]), d, progress=False)
    assert [r["seed"] for r in both] == [0, 1] and both[0]["final_eval_return"] == first[0]["final_eval_return"] \
        or np.isnan(first[0]["final_eval_return"])
    assert os.path.getmtime(os.path.join(d, "scores.csv")) == mtime  # the old cells were not rerun
    assert sorted(r["seed"] for r in results.load_scores(str(tmp_path / "run"))) == [0, 1]
    with pytest.raises(ValueError, match="different grid"):
        runner.run_group(config, grid.grid([1], [1]), d, progress=False)  # drops a cell it holds


def _mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True)
    return res.returncode == 0


_RERUN_THEN_CLEAN = """
import sys
from vaco_jax.studies.lag_sweep import cli
flags = sys.argv[3:]
for out in sys.argv[1:3]:
    sys.argv = ["lag_sweep.py"] + flags + ["--out", out]
    cli()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tiny tmpfs")
def test_a_full_disk_is_one_line_leaves_no_temporary_file_and_the_rerun_is_identical(tmp_path):
    disk = str(tmp_path / "disk")
    if not _mount_tmpfs(disk, "160k"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        cmd = [sys.executable, os.path.join(ROOT, "experiments", "lag_sweep.py"), "--preset", "tiny",
               "--no-progress", "--no-figures", "--bootstrap-reps", "50", "--episode-length", "30"]
        full = subprocess.run(cmd + ["--out", os.path.join(disk, "run")], capture_output=True, text=True,
                              cwd=ROOT, timeout=900)
        assert full.returncode == 1, (full.returncode, full.stderr[-2000:])
        errors = [l for l in full.stderr.splitlines() if l.strip() and not l.startswith("warning:")]
        assert errors == [errors[-1]] and "No space left on device" in errors[-1], full.stderr[-3000:]
        leftovers = [os.path.join(r, f) for r, _, fs in os.walk(disk) for f in fs if ".tmp." in f]
        assert not leftovers
        subprocess.run(["mount", "-o", "remount,size=64m", disk], check=True)
        # the rerun, then a run into an empty directory, from one process (one start and import fewer);
        # each goes through the script's own command line, and any error exits nonzero
        again = subprocess.run([sys.executable, "-c", _RERUN_THEN_CLEAN, os.path.join(disk, "run"),
                                str(tmp_path / "clean")] + cmd[2:], capture_output=True, text=True,
                               cwd=ROOT, timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        a = open(os.path.join(disk, "run", "point_mass", "ppo_clip", "scores.csv")).read()
        b = open(str(tmp_path / "clean" / "point_mass" / "ppo_clip" / "scores.csv")).read()
        assert a == b  # byte-identical after freeing space
    finally:
        subprocess.run(["umount", disk], capture_output=True)


_RESUME_SCRIPT = """
import json, sys
from vaco_jax.driver import grid, provenance, runner
from vaco_jax.core.config import Config
config = Config(**json.loads(sys.argv[3]))
rows = runner.run_group(config, grid.grid([1, 4, 2], [0]), sys.argv[1], progress=False,
                       max_chunks=int(sys.argv[2]) or None)
print(json.dumps(rows, default=float))
"""


def _on_devices(n, group_dir, max_chunks, config):
    import dataclasses

    env = dict(os.environ, XLA_FLAGS=f"{FAST_COMPILE} --xla_force_host_platform_device_count={n}",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", _RESUME_SCRIPT, group_dir, str(max_chunks),
                          json.dumps(dataclasses.asdict(config))], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_group_stopped_on_one_device_count_resumes_on_another(tmp_path):
    """3 cells: 2 + 2 (one padding copy) on 2 devices, 1 + 1 + 1 on 4 (three of them used). Stopped
    on 2 devices and resumed on 1, stopped on 1 and resumed on 4: each ends with the scores of an uninterrupted run on 1 device (checkpoints hold
    the real cells only and are laid out again on the devices at hand). This is also the test that
    a grid sharded over devices (initialised on 2; run on 4) computes what the unsharded grid does."""
    import jax

    config = tiny_config(**CONFIG)
    cells = grid.grid([1, 4, 2], [0])
    assert len(jax.local_devices()) == 1  # this process is the 1-device machine
    straight = runner.run_group(config, cells, str(tmp_path / "straight"), progress=False)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert _on_devices(2, a, 1, config) is None
    resumed_on_1 = runner.run_group(config, cells, a, progress=False)
    assert runner.run_group(config, cells, b, progress=False, max_chunks=1) is None
    resumed_on_4 = _on_devices(4, b, 0, config)
    for rows in (resumed_on_1, resumed_on_4):
        for r1, r2 in zip(rows, straight):
            for k in ("train_return_last5pct", "mean_policy_loss", "mean_clip_fraction"):
                np.testing.assert_allclose(r1[k], r2[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_every_cells_trained_policy_is_kept_and_loads_as_a_jitted_act_function(tmp_path):
    import jax

    from vaco_jax.envs import make_env
    from vaco_jax.driver.policies import load_policy

    d = _finished(tmp_path)
    assert not os.path.exists(os.path.join(d, "checkpoint"))  # the checkpoint goes, the policies stay
    saved = results.load_npz(os.path.join(d, "policies.npz"))
    assert {k.split("[")[0].split(".")[0] for k in saved} == {"policy", "value", "normalizer"}
    assert all(v.shape[0] == 2 for v in saved.values())  # one entry per cell
    acts = [load_policy(d, cell=c) for c in (0, 1)]
    env = make_env("point_mass", episode_length=30)
    state = env.reset(jax.random.PRNGKey(0))
    obs = state.core.obs
    a0, a1 = np.asarray(acts[0](obs)), np.asarray(acts[1](obs))
    assert a0.shape == (1,) and np.all(np.abs(a0) <= 1.0)
    assert np.array_equal(a0, np.asarray(acts[0](obs)))  # the mean: deterministic
    assert not np.array_equal(np.asarray(acts[0](obs, jax.random.PRNGKey(1))), a0)  # a sample
    total = 0.0
    for _ in range(20):  # the saved policy rolls out
        state, out = env.step(state, acts[1](state.core.obs))
        total += float(out.reward)
    assert np.isfinite(total)
    with pytest.raises(ResultsError, match="cell 5"):
        load_policy(d, cell=5)
    with pytest.raises(ValueError, match=r"point_mass observations have shape \(\d+,\)"):
        acts[0](np.zeros(7, np.float32))
    del a1


def test_a_swept_setting_is_summarised_on_its_own_never_pooled_as_more_seeds(tmp_path, capsys):
    """Rows that share task, method, lag depth and seed but differ in gamma are two configurations:
    summary.csv and diagnostics.csv hold each on its own (a ``setting`` column, three runs per cell,
    not six), the printed table has one block per setting, and the figures one line per method and
    setting. A method that does not read the swept knob (no gamma column) is a setting of its own."""
    from vaco_jax.analysis import tables
    from vaco_jax.analysis import figures
    rows = []
    for m in ("ppo_clip", "vaco"):
        for g in ((0.99, 0.995) if m == "ppo_clip" else (None,)):
            for b in (1, 4):
                for s in range(3):
                    r = {"env": "point_mass", "method": m, "lag_depth": b, "seed": s,
                         "final_eval_return": 10.0 + s + (100.0 if g == 0.995 else 0.0) + (50.0 if m == "vaco" else 0.0),
                         "auc_eval_return": 5.0, "train_return_last5pct": 1.0, "diverged": False,
                         "mean_clip_fraction": 0.1 if g == 0.99 else 0.3}
                    if g is not None:
                        r["gamma"] = g
                    rows.append(r)
    assert tables.setting_axes(rows) == ["gamma"]
    assert tables.setting_axes([r for r in rows if r.get("gamma") != 0.995]) == []  # one setting: as before
    # a table read back from a CSV that mixes the groups holds NaN where a group has no gamma: the same settings
    nan_rows = [r if "gamma" in r else {**r, "gamma": float("nan")} for r in rows]
    assert tables.setting_axes(nan_rows) == ["gamma"]
    assert [(s, len(g)) for s, g in tables.by_setting(nan_rows)] == [(s, len(g)) for s, g in tables.by_setting(rows)]
    assert tables.setting_of(nan_rows[-1], ["gamma"]) == ""
    for method in ("ppo_clip", "vaco"):
        g = tmp_path / "run" / "point_mass" / method
        g.mkdir(parents=True)
        mine = [r for r in rows if r["method"] == method]
        results.write_table(str(g / "scores.csv"), mine)
        results.write_cells(str(g), [{"i": i} for i in range(len(mine))])
    run = str(tmp_path / "run")
    summary, diag = tables.summarise(run, reps=50)
    means = {(r["setting"], r["method"], r["lag_depth"]): r for r in summary
             if r["aggregate"] == "mean" and r["normalization"] == "raw" and r["score"] == "final_eval_return"}
    assert set(means) == {("gamma=0.99", "ppo_clip", 1), ("gamma=0.99", "ppo_clip", 4),
                          ("gamma=0.995", "ppo_clip", 1), ("gamma=0.995", "ppo_clip", 4), ("", "vaco", 1), ("", "vaco", 4)}
    assert all(r["n_runs"] == 3 for r in means.values())
    assert means[("gamma=0.99", "ppo_clip", 1)]["point"] == pytest.approx(11.0)
    assert means[("gamma=0.995", "ppo_clip", 4)]["point"] == pytest.approx(111.0)
    assert means[("", "vaco", 1)]["point"] == pytest.approx(61.0)
    clip = {(r["setting"], r["method"], r["lag_depth"]): r["mean_clip_fraction"] for r in diag}
    assert clip[("gamma=0.99", "ppo_clip", 1)] == pytest.approx(0.1)
    assert clip[("gamma=0.995", "ppo_clip", 1)] == pytest.approx(0.3)
    on_disk = results.read_table(os.path.join(run, "summary.csv"))
    assert {r["setting"] if isinstance(r["setting"], str) else "" for r in on_disk} == {"gamma=0.99", "gamma=0.995", ""}

    _lag_sweep().print_table(summary)
    out = capsys.readouterr().out
    assert "gamma=0.99: IQM of the AUC" in out and "gamma=0.995: IQM of the AUC" in out
    assert "methods that do not read the swept values: IQM of the AUC" in out
    # the figures: one series per method and setting
    folded = figures.read_summary(run)
    assert {r["method"] for r in folded} == {"ppo_clip | gamma=0.99", "ppo_clip | gamma=0.995", "vaco"}
    assert figures.method_label("ppo_clip | gamma=0.99") == "PPO-Clip (gamma=0.99)"
    assert figures.plot_aggregate_vs_lag(run, normalization="raw")
    # figures that compare methods over their pooled runs refuse, naming the axis
    for figure in (figures.plot_probability_of_improvement, figures.plot_performance_profiles):
        with pytest.raises(figures.NoData, match=r"several settings \(gamma\)"):
            figure(run)


def test_a_finished_group_never_reports_less_or_other_than_it_holds(tmp_path, capsys):
    """Damage to a finished group: a lost cells.json is rebuilt from the plan when the scores hold exactly
    its cells (and named by every reader until then); a lost or unreadable config.json, a config.json of
    other settings (run.json gone, another learning rate given) and a lost policies.npz are each named."""
    import shutil

    d = _finished(tmp_path)
    cells, config = grid.grid([1, 4], [0]), tiny_config(**CONFIG)
    before = results.read_table(os.path.join(d, "scores.csv"))
    os.remove(os.path.join(d, "cells.json"))
    with pytest.raises(ResultsError, match="cells.json: missing beside scores.csv"):
        results.group_dirs(str(tmp_path))
    _same(runner.run_group(config, cells, d, progress=False), before)  # rebuilt, nothing re-run
    assert "rebuilt from the plan" in capsys.readouterr().err
    assert results.group_dirs(str(tmp_path)) == [d]
    os.remove(os.path.join(d, "cells.json"))
    with pytest.raises(ResultsError, match="does not hold the planned cells"):
        runner.run_group(config, grid.grid([1, 8], [0]), d, progress=False)
    runner.run_group(config, cells, d, progress=False)

    with pytest.raises(ConfigError, match=r"learning_rate: 0.0003 there, 0.001 now"):
        runner.run_group(config.replace(learning_rate=1e-3), cells, d, progress=False)
    saved = open(os.path.join(d, "config.json")).read()
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{")
    with pytest.raises(ResultsError, match="config.json: not valid JSON"):
        runner.run_group(config, cells, d, progress=False)
    os.remove(os.path.join(d, "config.json"))
    with pytest.raises(ResultsError, match="config.json: missing in a finished group"):
        runner.run_group(config, cells, d, progress=False)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(saved)
    shutil.move(os.path.join(d, "policies.npz"), str(tmp_path / "p.npz"))
    with pytest.raises(ResultsError, match="policies.npz: missing in a finished group"):
        runner.run_group(config, cells, d, progress=False)
    shutil.move(str(tmp_path / "p.npz"), os.path.join(d, "policies.npz"))
    _same(runner.run_group(config, cells, d, progress=False), before)
    # one flipped bit in a stored array: named by its checksum on the rerun, not passed over
    path = os.path.join(d, "policies.npz")
    good = open(path, "rb").read()
    arrays = dict(np.load(path))
    name = next(k for k in arrays if k != "__sha256__" and arrays[k].dtype == np.float32 and arrays[k].size)
    flipped = arrays[name].copy()
    flipped.view(np.uint32).reshape(-1)[0] ^= 1
    np.savez(path, **{**arrays, name: flipped})
    with pytest.raises(ResultsError, match="policies.npz: checksum mismatch"):
        runner.run_group(config, cells, d, progress=False)
    with open(path, "wb") as f:
        f.write(good)
    _same(runner.run_group(config, cells, d, progress=False), before)


def test_a_single_run_is_a_run_directory_every_reader_takes(tmp_path):
    """vaco-train's output is a one-cell group in its own run directory: the results reader, the
    policy loader and the renderer's directory lookup find it as they find a study's."""
    from vaco_jax.driver.policies import load_policy
    from vaco_jax.driver.render_cli import group_dir
    from vaco_jax.driver.train import run

    done = run(tiny_config(**CONFIG), seed=1, out=str(tmp_path), progress=False)
    assert group_dir(done.run_dir, None) == done.group_dir
    (row,) = results.load_scores(done.run_dir)
    assert row["seed"] == 1 and row["lag_depth"] == done.scores["lag_depth"]
    act = load_policy(done.group_dir, 0)
    assert np.asarray(act(np.zeros(2, np.float32))).shape == (1,)  # point_mass: (x, v) -> a force
