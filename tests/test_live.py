"""Live metrics (``--tensorboard``) and the staleness file of a group: event files read back here with
no TensorFlow or TensorBoard package (the TFRecord framing parsed by hand, each record's CRC-32C
checked, the events decoded with tensorboardX's bundled protobuf), compared with curves.csv and
staleness.npz. Tiny pure-JAX point_mass programs."""

import dataclasses
import glob
import os
import struct

import numpy as np
import pytest

from conftest import tiny_config, study_module
from vaco_jax.analysis import results
from vaco_jax.driver import grid, runner
from vaco_jax.driver.live import cell_run_name, tag_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = dict(num_evals=3, total_env_steps=8 * 16 * 6)  # as tests/test_integrity.py: shared compiled programs


# ----------------------------------------------------------------------------- reading event files

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def _masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path: str) -> list:
    """Every Event of one file: [u64 length][u32 masked crc of length][data][u32 masked crc of data]."""
    from tensorboardX.proto.event_pb2 import Event

    data = open(path, "rb").read()
    events, pos = [], 0
    while pos < len(data):
        header = data[pos: pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8: pos + 12])
        assert header_crc == _masked_crc(header), path
        body = data[pos + 12: pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length: pos + 16 + length])
        assert len(body) == length and body_crc == _masked_crc(body), path
        events.append(Event.FromString(body))
        pos += 16 + length
    return events


def read_run(logdir: str) -> tuple[dict, dict, int]:
    """``{step: {tag: simple_value}}``, ``{step: histogram proto}`` of every event file in ``logdir``,
    and the number of files. A step written twice fails the test (no duplicate without a crash)."""
    files = sorted(glob.glob(os.path.join(logdir, "*tfevents*")))
    scalars, hists = {}, {}
    for path in files:
        for ev in read_events(path):
            if not ev.HasField("summary"):
                continue
            assert ev.step not in scalars, f"step {ev.step} written twice in {logdir}"
            kinds = [(v, v.WhichOneof("value")) for v in ev.summary.value]
            scalars[ev.step] = {v.tag: v.simple_value for v, kind in kinds if kind == "simple_value"}
            hists[ev.step] = [v.histo for v, kind in kinds if kind == "histo"]
    return scalars, hists, len(files)


def _check_cell(logdir: str, rows: list[dict], counts: np.ndarray, skip) -> int:
    """The run of one cell holds, at each row's env steps, every number of the row and its histogram."""
    scalars, hists, n_files = read_run(logdir)
    assert sorted(scalars) == sorted(int(r["env_steps"]) for r in rows)
    for row, c in zip(rows, counts):
        got = scalars[int(row["env_steps"])]
        expected = {tag_for(k): v for k, v in row.items()
                    if k not in ("env", "method", "cell", "chunk", "env_steps", "nonfinite") and k not in skip
                    and not isinstance(v, str)}  # (nonfinite: a text column, empty -> NaN when read back)
        assert "returns/train_return" in expected and "diagnostics/mean_staleness" in expected
        assert set(expected) <= set(got)
        for tag, v in expected.items():  # event values are float32
            np.testing.assert_array_equal(np.float32(got[tag]), np.float32(v), err_msg=tag)
        shares = [got[f"staleness/share_age_{a}"] for a in range(len(c))]
        np.testing.assert_allclose(shares, c / c.sum(), rtol=1e-6)
        (hist,) = hists[int(row["env_steps"])]
        np.testing.assert_array_equal(hist.bucket, c)
        assert hist.num == c.sum()
        np.testing.assert_allclose(hist.sum / hist.num, row["mean_staleness"], rtol=1e-5)
    return n_files


# ----------------------------------------------------------------------------- tests

def _lag_sweep():
    return study_module("lag_sweep")


def test_a_study_with_tensorboard_writes_each_cells_rows_and_histograms(tmp_path):
    ls = _lag_sweep()
    out = str(tmp_path / "run")
    args = dict(preset="tiny", out=out, progress=False, figures=False, bootstrap_reps=10, seeds=(0,))
    ls.main(ls.Args(tensorboard=True, **args))
    group = os.path.join(out, "point_mass", "ppo_clip")
    curves = results.read_table(os.path.join(group, "curves.csv"))
    stale = results.load_staleness(out)["point_mass/ppo_clip"]
    cells = stale["cells"]
    assert stale["counts"].shape == (2, len(cells), 4)  # chunks x cells x buffer_capacity
    assert np.all(stale["counts"].sum(-1) == 2 * 8 * 16)  # every sample of a chunk (2 phases of 8 x 16)
    for i, cell in enumerate(cells):
        rows = [r for r in curves if r["cell"] == i]
        logdir = os.path.join(out, "tensorboard", "point_mass", "ppo_clip",
                              cell_run_name(i, cell["lag_depth"], cell["seed"]))
        assert _check_cell(logdir, rows, stale["counts"][:, i], skip=cell) == 1
    assert stale["counts"][:, 0, 1:].sum() == 0  # B = 1: all age 0
    # the flag is no part of the run's identity: the same run without it resumes (here: is finished)
    ls.main(ls.Args(tensorboard=False, **args))


def test_a_resumed_group_continues_its_staleness_file_and_event_files(tmp_path):
    d = str(tmp_path / "g")
    tb = str(tmp_path / "tb")
    cells = grid.grid([1, 4], [0])
    config = tiny_config(**CONFIG)
    assert runner.run_group(config, cells, d, progress=False, max_chunks=1, tensorboard_dir=tb) is None
    assert results.load_npz(os.path.join(d, "staleness.npz"))["counts"].shape == (1, 2, 8)
    runner.run_group(config, cells, d, progress=False, max_chunks=1, tensorboard_dir=tb)
    runner.run_group(config, cells, d, progress=False, tensorboard_dir=tb)
    curves = results.read_table(os.path.join(d, "curves.csv"))
    counts = results.load_staleness(str(tmp_path))["g"]["counts"]
    assert counts.shape == (3, 2, 8)
    for i, cell in enumerate(cells):
        rows = [r for r in curves if r["cell"] == i]
        # one event file per call, each with its own chunks; no step twice
        assert _check_cell(os.path.join(tb, cell_run_name(i, cell.lag_depth, cell.seed)), rows, counts[:, i],
                           skip=cell.row()) == 3


@pytest.mark.parametrize("damage", ["delete", "short"])
def test_a_damaged_or_short_staleness_file_restarts_the_group(tmp_path, damage, capsys):
    d = str(tmp_path / "g")
    cells = grid.grid([1, 4], [0])
    config = tiny_config(**CONFIG)
    runner.run_group(config, cells, d, progress=False, max_chunks=2)
    path = os.path.join(d, "staleness.npz")
    if damage == "delete":
        os.remove(path)
    else:  # one chunk fewer than the checkpoint has done
        results.save_npz(path, counts=results.load_npz(path)["counts"][:1])
    runner.run_group(config, cells, d, progress=False)
    err = capsys.readouterr().err
    assert "staleness.npz" in err and "restarting" in err
    counts = results.load_staleness(str(tmp_path))["g"]["counts"]
    assert counts.shape == (3, 2, 8) and np.all(counts.sum(-1) == 2 * 8 * 16)


def test_train_cli_with_tensorboard_writes_its_history(tmp_path):
    from vaco_jax.driver.train import main, train_args_class

    config = tiny_config(**CONFIG)
    out = str(tmp_path / "out")
    cls = train_args_class()
    flags = {f.name for f in dataclasses.fields(cls)}  # a sweep-only setting (grid_batch) is no flag of train
    args = cls(**{**{k: v for k, v in dataclasses.asdict(config).items() if k in flags}, "seed": 3, "out": out,
                  "progress": False, "tensorboard": True})
    assert main(args) == 0
    (run_dir,) = os.listdir(out)  # a single run is a one-cell group: the sweep's layout
    history = results.read_table(os.path.join(out, run_dir, "point_mass", config.method, "curves.csv"))
    (logdir,) = glob.glob(os.path.join(out, run_dir, "tensorboard", "point_mass", config.method, "*"))
    assert os.path.basename(logdir).startswith("cell-0_") and os.path.basename(logdir).endswith("_s3")
    scalars, hists, n_files = read_run(logdir)
    assert n_files == 1 and sorted(scalars) == [int(h["env_steps"]) for h in history]
    for h in history:
        got = scalars[int(h["env_steps"])]
        for k in ("eval_return", "train_return", "policy_loss", "clip_fraction", "mean_staleness"):
            if np.isfinite(h[k]):
                np.testing.assert_array_equal(np.float32(got[tag_for(k)]), np.float32(h[k]), err_msg=k)
        (hist,) = hists[int(h["env_steps"])]
        assert hist.num == 2 * 8 * 16
