"""Scale (docs/scale.md): the memory estimate printed before compiling, groups split into programs of
at most ``--max-cells-per-program`` cells, a group's cells run in batches (``--grid-batch``), and one
sweep over two ``jax.distributed`` processes.
Training runs only on the tiny pure-JAX point_mass task."""

import os
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import FAST_COMPILE, tiny_config, study_module
from vaco_jax.analysis import results
from vaco_jax.driver import devices, grid, memory, runner
from vaco_jax.core.config import ConfigError, make_traced, stack_traced
from vaco_jax.core.train import make_train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Programs of another size batch their matmuls differently (see tests/test_shard.py).
SCORE_RTOL, SCORE_ATOL = 1e-4, 1e-7
NUMBERS = ("final_eval_return", "auc_eval_return", "train_return_last5pct")


def _lag_sweep():
    return study_module("lag_sweep")


TINY_FLAGS = ["--preset", "tiny", "--seeds", "0", "--no-progress", "--no-figures", "--bootstrap-reps", "50",
              "--episode-length", "30"]


def _run(out, **flags):
    ls = _lag_sweep()
    return ls.main(ls.Args(preset="tiny", out=out, progress=False, figures=False, bootstrap_reps=50,
                           episode_length=30, seeds=(0,), **flags))


def _scores(run_dir):
    return {(r["lag_depth"], r["seed"]): r for r in results.load_scores(run_dir)}


def _assert_same_scores(a, b):
    sa, sb = _scores(a), _scores(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        for name in NUMBERS:
            np.testing.assert_allclose(sb[k][name], sa[k][name], rtol=SCORE_RTOL, atol=SCORE_ATOL, err_msg=name)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("scale") / "whole")
    _run(out)
    return out


# ----------------------------------------------------------------------------- memory estimate

@pytest.mark.parametrize("overrides, cells", [
    (dict(), 2),
    (dict(num_envs=64, unroll_length=32, total_env_steps=64 * 32 * 2, policy_hidden=(128, 128),
          value_hidden=(128, 128), eval_episodes=4), 1),
])
def test_the_memory_estimate_stays_within_a_factor_of_two_of_xlas_own(overrides, cells):
    config = tiny_config(**overrides)
    trainer = make_train(config)
    estimate = memory.cell_bytes(config, trainer)
    traced = stack_traced([make_traced(config, 1)] * cells)
    keys = jnp.stack([jax.random.PRNGKey(i) for i in range(cells)])
    state = jax.eval_shape(jax.vmap(trainer.init), keys, traced)
    m = jax.jit(jax.vmap(trainer.run_chunk)).lower(state, traced).compile().memory_analysis()
    xla = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes) / cells
    assert 0.9 <= estimate["total"] / xla <= 2.0, (estimate, xla)
    assert estimate["state"] == memory.tree_bytes(jax.eval_shape(trainer.init, keys[0], make_traced(config, 1)))


def test_a_group_too_large_for_the_device_is_refused_naming_the_flag_that_fits(tmp_path, monkeypatch):
    per_cell = memory.cell_bytes(tiny_config())["total"]
    # Room for one cell: 80% of the device memory holds 1.25 cells.
    monkeypatch.setattr(memory, "device_bytes", lambda: (int(per_cell * 1.25 / memory.USABLE_FRACTION), "test"))
    memory._CELL_BYTES.clear()
    out = str(tmp_path / "run")
    with pytest.raises(ConfigError, match=r"2 cells per program need .* allowed: --max-cells-per-program 1 or less"):
        _run(out)
    assert not os.path.exists(out)  # refused before anything was written


def test_the_estimate_is_printed_before_compiling(tmp_path, capsys, whole):
    _run(whole)  # finished: reads its scores again, prints the plan and the estimate
    text = capsys.readouterr().out
    assert "memory estimate before compiling" in text and "per cell; 2 cells per program" in text


# ----------------------------------------------------------------------------- --max-cells-per-program

def test_a_group_runs_as_parts_of_at_most_max_cells_and_gives_the_same_scores(tmp_path, whole):
    out = str(tmp_path / "parts")
    _run(out, max_cells_per_program=1)
    group = os.path.join(out, "point_mass", "ppo_clip")
    assert sorted(os.listdir(group)) == ["part-0-of-2", "part-1-of-2"]
    assert runner.group_finished(group)
    assert os.path.exists(os.path.join(out, "summary.csv"))
    _assert_same_scores(whole, out)
    with pytest.raises(ConfigError, match=r"holds a split into 2 part\(s\), this command gives 1"):
        _run(out)  # another split would run the cells twice
    with pytest.raises(ConfigError, match="was started as one program"):
        _run(whole, max_cells_per_program=1)
    with pytest.raises(ConfigError, match="max_cells_per_program=0 must be a positive integer"):
        _run(str(tmp_path / "bad"), max_cells_per_program=0)


def test_splitting_is_nearly_even_and_keeps_the_plan_order():
    assert memory.split_sizes(10, 4) == [4, 3, 3]
    assert memory.split_sizes(3, 5) == [3]
    g = grid.Group(tiny_config(), tuple(grid.grid([1, 2, 4], range(3))), "t/m", "t/m")
    parts = grid.split_group(g, 4)
    assert [len(p.cells) for p in parts] == [3, 3, 3]
    assert [c for p in parts for c in p.cells] == list(g.cells)
    assert parts[2].subdir == os.path.join("t/m", "part-2-of-3")
    assert grid.split_group(g, None) == [g] and grid.split_group(g, 9) == [g]


# ----------------------------------------------------------------------------- grid_batch

def test_a_group_run_in_batches_of_cells_gives_the_same_scores_and_is_its_own_setting(tmp_path, whole):
    out = str(tmp_path / "batched")
    _run(out, grid_batch=1)  # the 2 cells one after another
    _assert_same_scores(whole, out)
    with pytest.raises(ConfigError, match="grid_batch: None there, 1 now"):
        _run(whole, grid_batch=1)  # the numbers differ in rounding: a resume keeps one layout
    with pytest.raises(ConfigError, match=r"grid_batch=0 must be an integer >= 1, or None"):
        _run(str(tmp_path / "bad"), grid_batch=0)
    assert not os.path.exists(tmp_path / "bad")


def test_grid_program_maps_over_batches_and_pads_nothing_itself():
    def fn(x, t):
        return {"y": x["a"] * t + 1.0, "empty": x["empty"]}

    x = {"a": jnp.arange(12.0).reshape(6, 2), "empty": jnp.zeros((6, 0))}
    t = jnp.arange(6.0)
    whole = jax.jit(devices.grid_program(fn))(x, t)
    for batch in (1, 2, 3, 6):
        out = jax.jit(devices.grid_program(fn, batch))(x, t)
        np.testing.assert_array_equal(out["y"], whole["y"])
        assert out["empty"].shape == (6, 0)
    with pytest.raises(ValueError, match="6 cells are not a multiple of grid_batch=4"):
        devices.grid_program(fn, 4)(x, t)


def test_grid_layout_uses_as_few_cells_per_device_then_as_few_devices_as_it_can():
    assert devices.grid_layout(16, None, 1) == (1, 16)
    assert devices.grid_layout(16, None, 2) == (2, 8)
    assert devices.grid_layout(12, None, 8) == (6, 2)  # not 8 x 2 with 4 copies: the same time, no padding
    assert devices.grid_layout(60, None, 8) == (8, 8)  # 4 copies
    assert devices.grid_layout(3, None, 4) == (3, 1)
    assert devices.grid_layout(3, None, 2) == (2, 2)
    assert devices.grid_layout(5, 2, 1) == (1, 6)  # grid_batch: a multiple of the batch per device
    assert devices.grid_layout(16, 3, 2) == (2, 9)
    assert devices.grid_layout(6, 4, 2) == (2, 4)


_SHARD_MAP_SCRIPT = """
import json
import jax, jax.numpy as jnp, numpy as np
from vaco_jax.driver import devices, grid, memory, runner
def fn(x, t):  # a while_loop whose trip count depends on the cell, like MJX's constraint solver
    def body(c):
        i, v = c
        return i + 1, v * 0.5 + t
    return jax.lax.while_loop(lambda c: c[0] < x, body, (0, t))[1]

x = jnp.arange(8) % 5
t = jnp.linspace(0.0, 1.0, 8)
mesh = devices.grid_mesh(2)
sh = devices.grid_sharding(mesh)
xs, ts = jax.device_put((x, t), sh)
plain = jax.jit(devices.grid_program(fn))(x, t)
out = {"devices": len(jax.local_devices())}
for batch in (None, 2):
    prog = jax.jit(devices.grid_program(fn, batch, mesh))
    got = prog(xs, ts)
    out[f"equal_{batch}"] = bool(np.array_equal(np.asarray(got), np.asarray(plain)))
    out[f"spread_{batch}"] = len(got.sharding.device_set)
    out[f"collectives_{batch}"] = "all-reduce" in prog.lower(xs, ts).compile().as_text()
    prog(xs, prog(xs, got))  # a chunk's output is the next chunk's input: the same program
    out[f"compiles_{batch}"] = prog._cache_size()
spmd = jax.jit(devices.grid_program(fn), in_shardings=sh, out_shardings=sh)
out["collectives_spmd"] = "all-reduce" in spmd.lower(xs, ts).compile().as_text()
# a state restored from a checkpoint (grid_put) is laid out as the program's own output, zero-size
# leaves included (MJX keeps empty arrays), so the resumed chunk is the same compiled program
with_empty = jax.jit(devices.grid_program(lambda a, e: (a + 1.0, e * 2.0), None, mesh))
restored = devices.grid_put((t, jnp.zeros((8, 0))), mesh)
own = with_empty(*restored)
out["restored_layout"] = [str(a.sharding.spec) for a in restored] == [str(a.sharding.spec) for a in own]
with_empty(*own)
out["restored_compiles"] = with_empty._cache_size()
print(json.dumps(out))
"""


def test_a_sharded_grid_runs_each_devices_cells_alone_with_no_value_crossing_devices():
    """On 2 forced host devices: ``grid_program`` with a mesh gives vmap's numbers (with and without
    ``grid_batch``), spreads the cells over both devices, compiles no collective (where the same
    vmap split by shardings, SPMD, reduces the while_loop's condition over the devices), and its
    output feeds the next call without a second compile, as does a state placed by ``grid_put`` (a
    restored checkpoint), zero-size leaves included."""
    import json

    env = dict(os.environ, XLA_FLAGS=f"{FAST_COMPILE} --xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", _SHARD_MAP_SCRIPT], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"devices": 2, "equal_None": True, "spread_None": 2, "collectives_None": False, "compiles_None": 1,
                   "equal_2": True, "spread_2": 2, "collectives_2": False, "compiles_2": 1, "collectives_spmd": True,
                   "restored_layout": True, "restored_compiles": 1}


# ----------------------------------------------------------------------------- jax.distributed

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.multiprocess  # not in the default run: docs/scale.md, "Several processes or hosts"
def test_one_sweep_over_two_jax_distributed_processes_equals_the_plain_run(tmp_path, whole):
    out = str(tmp_path / "distributed")
    port = _free_port()
    procs = []
    for pid in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "VACO_JAX_COORDINATOR": f"127.0.0.1:{port}",
               "VACO_JAX_NUM_PROCESSES": "2", "VACO_JAX_PROCESS_ID": str(pid), "PYTHONPATH": ROOT,
               "VACO_JAX_DEBUG": "1"}
        env.pop("XLA_FLAGS", None)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "experiments", "lag_sweep.py"), *TINY_FLAGS, "--out", out,
             "--distributed"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for pid, text in enumerate(outputs):
        print(f"----- process {pid} (exit {procs[pid].returncode})\n{text[-4000:]}")
    assert [p.returncode for p in procs] == [0, 0]
    assert "process 0 of 2" in outputs[0] and "process 1 of 2" in outputs[1]
    group = os.path.join(out, "point_mass", "ppo_clip")
    assert sorted(os.listdir(group)) == ["shard-0-of-2", "shard-1-of-2"]
    assert os.path.exists(os.path.join(out, "summary.csv"))  # written once, by process 0
    assert "lag sweep finished" in outputs[0] and "lag sweep finished" not in outputs[1]
    _assert_same_scores(whole, out)


def test_distributed_settings_are_checked(monkeypatch):
    monkeypatch.setenv("VACO_JAX_COORDINATOR", "127.0.0.1:1")
    monkeypatch.delenv("VACO_JAX_NUM_PROCESSES", raising=False)
    monkeypatch.delenv("VACO_JAX_PROCESS_ID", raising=False)
    with pytest.raises(ConfigError, match="set all of VACO_JAX_COORDINATOR, VACO_JAX_NUM_PROCESSES"):
        devices.init_distributed()
    monkeypatch.setenv("VACO_JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("VACO_JAX_PROCESS_ID", "2")
    with pytest.raises(ConfigError, match="must be in 0..1"):
        devices.init_distributed()


# ----------------------------------------------------------------------------- compile time

def test_groups_of_one_task_share_one_compiled_evaluation():
    """The chunk's evaluation reads no method, lag or knob: the groups of a task compile it once."""
    from vaco_jax.envs import make_env
    from vaco_jax.core.train import evaluation_program

    evaluating = dict(eval_episodes=2)
    clip, vaco = make_train(tiny_config(method="ppo_clip", **evaluating)), make_train(tiny_config(method="vaco", **evaluating))
    assert clip.evaluation_signature() == vaco.evaluation_signature()
    assert evaluation_program(clip) is evaluation_program(vaco)
    assert evaluation_program(clip, layout=("grid", 2)) is not evaluation_program(clip)  # another layout
    for other in (dict(eval_episodes=3), dict(policy_hidden=(8,)), dict(activation="relu"),
                  dict(normalize_observations=False), dict(episode_length=40)):
        trainer = make_train(tiny_config(method="vaco", **{**evaluating, **other}))
        assert evaluation_program(trainer) is not evaluation_program(clip), other
    from vaco_jax.envs import PointMass, register_env

    register_env("point_mass_again", lambda backend: PointMass())
    first = make_train(tiny_config(env="point_mass_again", **evaluating))
    assert evaluation_program(make_train(tiny_config(env="point_mass_again", **evaluating))) is evaluation_program(first)
    register_env("point_mass_again", lambda backend: PointMass())  # the name now means another env object
    assert evaluation_program(make_train(tiny_config(env="point_mass_again", **evaluating))) is not evaluation_program(first)
    handed = make_train(tiny_config(**evaluating), env=make_env("point_mass", episode_length=50))
    assert handed.evaluation_signature() is None  # an env object of unknown make: never shared
    assert evaluation_program(handed) is not evaluation_program(handed)


def test_a_group_laid_out_in_one_call_shares_its_evaluation_and_pads_with_its_last_cell(monkeypatch):
    """``group_program`` builds the trainer, then lays the group out in one call (``devices.place_group``):
    the evaluation over the grid is one program for the groups of a task laid out alike (any method, any
    number of cells), another for another layout or an env handed in, and the padding cells are copies of
    the last cell, on a new group as on a resumed one."""
    from vaco_jax.driver import program
    from vaco_jax.envs import make_env

    calls = []
    monkeypatch.setattr(program, "place_group", lambda *a, **k: calls.append(1) or devices.place_group(*a, **k))
    cells = [grid.Cell(1, 0), grid.Cell(4, 1), grid.Cell(2, 2)]
    evaluating = dict(eval_episodes=2)
    clip = program.group_program(tiny_config(method="ppo_clip", **evaluating), cells, devices=1)
    vaco = program.group_program(tiny_config(method="vaco", **evaluating), cells[:2], devices=1)
    assert clip.evaluation is vaco.evaluation and len(calls) == 2
    in_batches = tiny_config(method="ppo_clip", grid_batch=2, **evaluating)
    batched = program.group_program(in_batches, cells, devices=1)
    assert batched.evaluation is not clip.evaluation  # cells in batches of 2: another layout
    config = tiny_config(**evaluating)
    handed = [program.group_program(config, cells, make_train(config, env=make_env("point_mass", episode_length=50)),
                                    devices=1) for _ in range(2)]
    assert handed[0].evaluation is not handed[1].evaluation  # an env of unknown make: never shared
    assert (batched.padded, batched.cells) == (4, 3)
    placed = (batched.keys, batched.traced)
    for tree in (placed, batched.repad(batched.unpad(placed))):  # a resumed group's tree is placed alike
        for leaf in jax.tree.leaves(tree):
            assert leaf.shape[0] == 4
            np.testing.assert_array_equal(np.asarray(leaf[3]), np.asarray(leaf[2]))
    own = [make_traced(in_batches, c.lag_depth) for c in cells]
    for got, want in zip(jax.tree.leaves(batched.traced), jax.tree.leaves(stack_traced(own + own[-1:]))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_chunk_then_its_evaluation_program_is_run_chunk():
    """The host drivers' two programs (train_chunk, then the shared evaluation) give run_chunk's state
    and numbers; the evaluation reads the state the chunk ends in."""
    from vaco_jax.core.train import evaluated, evaluation_program

    config = tiny_config(method="vaco", eval_episodes=2)
    trainer = make_train(config)
    traced = make_traced(config, 2)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(3), traced)
    whole_state, whole = jax.jit(trainer.run_chunk)(state, traced)
    split_state, split = jax.jit(trainer.train_chunk)(state, traced)
    assert np.isnan(split.eval_return)
    split = evaluated(split, evaluation_program(trainer), split_state, config)
    for a, b in zip(jax.tree.leaves((whole_state, whole)), jax.tree.leaves((split_state, split))):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-7)
    assert np.isfinite(split.eval_return)
    unevaluated = split._replace(eval_return=jnp.nan)  # eval_episodes=0: no program is called
    assert evaluated(unevaluated, None, split_state, tiny_config(eval_episodes=0)) is unevaluated


def test_the_compiled_program_cache_goes_where_asked_and_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.delenv(devices.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    default = devices.compilation_cache_dir()
    assert os.path.dirname(default) == os.path.join(str(tmp_path), "vaco_jax", "xla")
    assert os.path.basename(default) == devices._machine_tag()  # one folder per kind of processor
    for off in ("off", "0", "", "none"):
        monkeypatch.setenv(devices.CACHE_ENV, off)
        assert devices.compilation_cache_dir() is None
    monkeypatch.setenv(devices.CACHE_ENV, str(tmp_path / "mine"))
    assert devices.compilation_cache_dir() == str(tmp_path / "mine")


_CACHE_SCRIPT = """
import os, sys, jax, jax.numpy as jnp
from vaco_jax.driver import devices, grid, memory, runner
path = devices.use_compilation_cache()
print("DIR", path)
jax.jit(lambda x: jnp.sin(x) * 2)(jnp.ones(3)).block_until_ready()
print("FILES", sorted(f for f in os.listdir(path) if f.endswith("-cache")) if path else [])
"""


def test_scripts_keep_compiled_programs_unless_the_user_chose_a_cache_or_turned_it_off(tmp_path):
    """``cli_main`` (every script) calls ``use_compilation_cache``: by default the programs land in the
    user's cache folder; JAX_COMPILATION_CACHE_DIR set by the user wins; 'off' keeps nothing."""
    def run(**env_vars):
        env = {**os.environ, "PYTHONPATH": ROOT, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", **env_vars}
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env.pop(devices.CACHE_ENV, None)
        env.update(env_vars)
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("DIR", "FILES")))
        return lines["DIR"], lines["FILES"], out.stderr

    path, files, _ = run()
    assert path.startswith(str(tmp_path / "xdg" / "vaco_jax" / "xla")) and "jit__lambda" in files
    path, files, _ = run(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "users"))
    assert path == str(tmp_path / "users") and "jit__lambda" in files
    path, files, _ = run(**{devices.CACHE_ENV: "off"})
    assert path == "None" and files == "[]"
    (tmp_path / "a_file").write_text("")
    path, files, err = run(**{devices.CACHE_ENV: str(tmp_path / "a_file" / "cache")})  # cannot be made
    assert path == "None" and "warning: compiled programs are not kept" in err and devices.CACHE_ENV in err
