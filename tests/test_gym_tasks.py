"""Gymnasium's locomotion tasks on MuJoCo's C engine against Gymnasium's own environments.

Tolerance: the physics state (qpos, qvel, the whole mjSTATE_INTEGRATION vector) must equal
Gymnasium's exactly; observations are our float32 of Gymnasium's float64 (equal after that cast);
rewards agree to float32 rounding (relative 1e-6, absolute 1e-5); terminated exactly, and truncated
exactly except where Gymnasium reports both (a termination on the time limit's last step), where ours
reports the termination alone (the contract of docs/envs.md).
"""

import os
import subprocess
import sys
import textwrap

import gymnasium
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy import stats

from vaco_jax.core.config import ConfigError
from vaco_jax.envs import make_env, reset_batch
from vaco_jax.envs import cengine
from vaco_jax.envs.gymnasium_tasks import GYM_TASKS, InvertedDoublePendulumTask

TASKS = ["Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "Ant-v4", "Humanoid-v4",
         "Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Ant-v5", "Humanoid-v5",
         "Swimmer-v4", "InvertedPendulum-v4", "InvertedDoublePendulum-v4",
         "Swimmer-v5", "InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Reacher-v4", "Reacher-v5",
         "HumanoidStandup-v4", "HumanoidStandup-v5", "Pusher-v5"]
SPEC = mujoco.mjtState.mjSTATE_INTEGRATION


def _gym_state(genv):
    u = genv.unwrapped
    out = np.empty(mujoco.mj_stateSize(u.model, SPEC))
    mujoco.mj_getState(u.model, u.data, out, SPEC)
    return out


def _adopt(env, state, genv, obs):
    """Our env state, set to Gymnasium's current one (after its reset), with its observation."""
    u = genv.unwrapped
    eng = cengine.engine(env.name)
    fields = {"qpos": u.data.qpos[None].copy(), "qvel": u.data.qvel[None].copy()}
    for f in eng.task.read_fields():
        fields[f] = np.asarray(getattr(u.data, f))[None].copy()
    position = eng.task.forward_position(np, fields, eng.consts)[0]
    core = state.core.replace(physics=jnp.asarray(cengine._bits(_gym_state(genv))),
                              position=jnp.asarray(cengine._bits(position)),
                              obs=jnp.asarray(obs, jnp.float32))
    return state._replace(core=core, episode_step=jnp.zeros((), jnp.int32))


@pytest.mark.parametrize("name", TASKS)
def test_steps_equal_gymnasium(name):
    episode_length = 40  # short, so that HalfCheetah (never terminates) truncates several times
    env = make_env(name, episode_length=episode_length)
    genv = gymnasium.make(name, max_episode_steps=episode_length)
    step = jax.jit(env.step)
    rng = np.random.default_rng(0)
    low, high = genv.action_space.low, genv.action_space.high
    gobs, _ = genv.reset(seed=1)
    state = _adopt(env, env.reset(jax.random.PRNGKey(0)), genv, gobs)
    ends = {"terminated": 0, "truncated": 0}
    infos = []
    for t in range(160):
        action = rng.uniform(low, high).astype(np.float32)
        gobs, greward, gterm, gtrunc, info = genv.step(action)
        infos.append(info)
        state, out = step(state, jnp.asarray(action))
        ours = cengine._float64(np.asarray(state.core.physics))
        if not (gterm or gtrunc):  # the physics itself, bit for bit (after an end ours has reset)
            np.testing.assert_array_equal(ours, _gym_state(genv), err_msg=f"{name} step {t}")
        np.testing.assert_array_equal(np.asarray(out.next_obs), gobs.astype(np.float32), err_msg=f"{name} step {t}")
        np.testing.assert_allclose(float(out.reward), greward, rtol=1e-6, atol=1e-5, err_msg=f"{name} step {t}")
        # Gymnasium's TimeLimit sets truncated on a terminating last step too; ours never sets both
        assert bool(out.termination) == gterm and bool(out.truncation) == (gtrunc and not gterm), (name, t)
        if gterm or gtrunc:
            ends["terminated" if gterm else "truncated"] += 1
            gobs, _ = genv.reset(seed=int(rng.integers(1 << 30)))
            state = _adopt(env, state, genv, gobs)
    assert sum(ends.values()) >= 2, ends
    if name.startswith("HalfCheetah"):
        assert ends["truncated"] >= 3
    if name.endswith("-v5") and "reward_survive" in infos[0]:  # v5's unpaid healthy reward was met
        assert ends["terminated"] >= 1 and any(i["reward_survive"] == 0 for i in infos), name
    if GYM_TASKS[name].contact_cost_weight:  # and its contact cost
        key = "reward_impact" if "reward_impact" in infos[0] else "reward_contact"  # HumanoidStandup's name
        assert any(i[key] != 0 for i in infos), name
    assert int(state.core.unstable_steps) == 0


@pytest.mark.parametrize("name", ["Hopper-v4", "HalfCheetah-v4", "Reacher-v4", "Pusher-v5"])
def test_reset_distribution_is_gymnasiums(name):
    """Ours: 2,000 resets in one call; Gymnasium: 2,000 seeded resets. Each coordinate's distribution
    (qpos: uniform; qvel: uniform for Hopper, normal for HalfCheetah) agrees by a two-sample KS test."""
    n = 2000
    env = make_env(name)
    eng = cengine.engine(name)
    ours = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(3), n))
    states = cengine._float64(np.asarray(ours.core.physics))
    qpos, qvel = states[:, 1:1 + eng.nq], states[:, 1 + eng.nq:1 + eng.nq + eng.nv]
    genv = gymnasium.make(name)
    g = []
    for i in range(n):
        genv.reset(seed=i)
        g.append(_gym_state(genv))
    g = np.array(g)
    gq, gv = g[:, 1:1 + eng.nq], g[:, 1 + eng.nq:1 + eng.nq + eng.nv]
    pvalues = [stats.ks_2samp(a, b).pvalue for a, b in zip(np.c_[qpos, qvel].T, np.c_[gq, gv].T)]
    assert min(pvalues) > 1e-4, pvalues
    if name.startswith("Reacher"):  # the target uniform in the disc of radius 0.2, at rest
        assert np.all(np.hypot(qpos[:, -2], qpos[:, -1]) < 0.2) and np.all(qvel[:, -2:] == 0)
        return
    if name.startswith("Pusher"):  # the object outside the goal's disc of radius 0.17, both at rest
        assert np.all(np.hypot(qpos[:, -4], qpos[:, -3]) > 0.17) and np.all(qvel[:, -4:] == 0)
        assert np.all(qpos[:, :7] == eng.init_qpos[:7]) and np.all(qpos[:, -2:] == 0)
        return
    s = GYM_TASKS[name].reset_noise_scale
    assert np.all(np.abs(qpos - eng.init_qpos) <= s)
    # the first observation is Gymnasium's function of that state (after mj_forward)
    np.testing.assert_array_equal(np.asarray(ours.core.obs)[:, :eng.nq - 1], qpos[:, 1:].astype(np.float32))


@pytest.mark.parametrize("name", ["Swimmer-v4", "InvertedPendulum-v5", "InvertedDoublePendulum-v4", "Reacher-v4",
                                  "Pusher-v5"])
def test_a_reset_observation_is_gymnasiums_of_the_reset_state(name):
    """Our reset's observation equals Gymnasium's ``_get_obs`` of the same state after its ``set_state``
    (which calls mj_forward): InvertedDoublePendulum's reads a derived field (qfrc_constraint)."""
    env = make_env(name)
    eng = cengine.engine(name)
    ours = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(7), 4))
    states = cengine._float64(np.asarray(ours.core.physics))
    genv = gymnasium.make(name).unwrapped
    genv.reset(seed=0)
    for i in range(4):
        genv.set_state(states[i, 1:1 + eng.nq], states[i, 1 + eng.nq:1 + eng.nq + eng.nv])
        np.testing.assert_array_equal(np.asarray(ours.core.obs[i]), genv._get_obs().astype(np.float32))


def _rollout(env, keys, steps=30):
    """A scan of ``steps`` vmapped steps from the resets of ``keys`` with fixed pseudo-random actions."""
    def run(k):
        state = jax.vmap(env.reset)(jax.random.split(k, 8))

        def body(s, t):
            a = jax.random.uniform(jax.random.fold_in(k, t), (8, env.action_size), minval=-1.0, maxval=1.0)
            s, out = jax.vmap(env.step)(s, a)
            return s, (out.reward, out.next_obs, s.core.physics)
        return jax.lax.scan(body, state, jnp.arange(steps))[1]
    return jax.jit(jax.vmap(run))(keys)


def test_grid_equals_its_cells_and_threads_do_not_matter():
    env = make_env("Hopper-v4", episode_length=25)
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    together = _rollout(env, keys)
    for i in range(3):
        alone = _rollout(env, keys[i:i + 1])
        for a, b in zip(together, alone):
            np.testing.assert_array_equal(np.asarray(a[i]), np.asarray(b[0]))
    try:
        cengine.set_threads(1)
        one = _rollout(env, keys)
    finally:
        cengine.set_threads(None)
    for a, b in zip(together, one):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_grid_is_bit_identical_for_any_thread_count(tmp_path):
    """Four cells of Hopper-v4 with the engine on 1 and on 2 threads, each in a process of its own."""
    script = textwrap.dedent("""
        import sys, numpy as np, jax, jax.numpy as jnp
        from vaco_jax.envs import make_env, cengine
        cengine.set_threads(int(sys.argv[2]))
        env = make_env("Hopper-v4", episode_length=25)
        def run(k):
            state = jax.vmap(env.reset)(jax.random.split(k, 8))
            def body(s, t):
                a = jax.random.uniform(jax.random.fold_in(k, t), (8, env.action_size), minval=-1.0, maxval=1.0)
                s, out = jax.vmap(env.step)(s, a)
                return s, out.reward
            return jax.lax.scan(body, state, jnp.arange(30))[1]
        keys = jax.random.split(jax.random.PRNGKey(5), 4)
        np.save(sys.argv[1], np.asarray(jax.jit(jax.vmap(run))(keys)))
    """)
    results = []
    for threads in (1, 2):
        path = tmp_path / f"out_{threads}.npy"
        subprocess.run([sys.executable, "-c", script, str(path), str(threads)], check=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
        results.append(np.load(path))
    np.testing.assert_array_equal(results[0], results[1])


def test_a_c_engine_group_stays_on_one_device_and_others_use_every_device():
    """The C engine's step is a host callback on XLA's CPU pool: a group split over as many devices as
    cores can leave no pool thread free to hand a callback its arguments (docs/scale.md)."""
    from vaco_jax.driver import devices
    from vaco_jax.core.config import Config

    assert devices.devices_for(Config(env="Hopper-v4")) == 1
    assert devices.devices_for(Config(env="Hopper-v4", backend="mjx")) == len(jax.local_devices())
    assert devices.devices_for(Config(env="point_mass")) == len(jax.local_devices())


def test_bad_input_is_one_line():
    with pytest.raises(ConfigError, match="backend='generalized' is not valid for env='Hopper-v4'.*mujoco, mjx"):
        make_env("Hopper-v4", backend="generalized")
    with pytest.raises(ConfigError, match="backend='mujoco' is not valid for env='hopper'"):
        make_env("hopper", backend="mujoco")
    with pytest.raises(ConfigError, match="env='Hopper-v9' is not valid"):
        make_env("Hopper-v9")
    env = make_env("Hopper-v4")
    state = env.reset(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"Hopper-v4: an action has shape \(3,\), got \(4,\)"):
        env.step(state, jnp.zeros(4))


def test_a_model_that_does_not_load_is_one_line(monkeypatch, tmp_path):
    from vaco_jax.envs import gymnasium_tasks

    broken = tmp_path / "hopper.xml"
    broken.write_text("<mujoco><worldbody><body></mujoco>")
    monkeypatch.setattr(gymnasium_tasks, "model_path", lambda task: str(broken))
    with pytest.raises(ConfigError, match=r"env='Hopper-v4': its model .* does not load"):
        gymnasium_tasks.load_model(GYM_TASKS["Hopper-v4"])


def test_unstable_step_ends_the_episode_and_is_counted():
    env = make_env("Hopper-v4")
    state = env.reset(jax.random.PRNGKey(0))
    eng = cengine.engine("Hopper-v4")
    physics = cengine._float64(np.asarray(state.core.physics)).copy()
    physics[1 + eng.nq:1 + eng.nq + eng.nv] = 1e30  # velocities MuJoCo rejects
    state = state._replace(core=state.core.replace(physics=jnp.asarray(cengine._bits(physics))))
    state, out = jax.jit(env.step)(state, jnp.zeros(3))
    assert float(out.termination) == 1.0 and int(state.core.unstable_steps) == 1


def test_mjx_loads_and_steps_the_same_definition():
    env = make_env("Hopper-v4", backend="mjx", episode_length=10)
    state = reset_batch(env, jax.random.PRNGKey(0), 2)
    step = jax.jit(jax.vmap(env.step))
    for _ in range(3):
        state, out = step(state, jnp.zeros((2, 3)))
    assert out.next_obs.shape == (2, 11) and np.all(np.isfinite(np.asarray(out.reward)))
    assert np.all(np.abs(np.asarray(out.reward) - 1.0) < 0.1)  # healthy reward, hardly moving


def test_training_resumed_from_a_checkpoint_equals_uninterrupted(tmp_path):
    """PPO-Clip on Hopper-v4 (C engine) with lag, 4 chunks against 2, a checkpoint, 2 more: bit for bit,
    evaluations included (they step the engine too)."""
    from vaco_jax.driver.checkpoint import restore_checkpoint, save_checkpoint
    from vaco_jax.core.config import Config, make_traced
    from vaco_jax.core.train import make_train

    config = Config(env="Hopper-v4", num_envs=8, unroll_length=16, total_env_steps=8 * 16 * 4, num_evals=4,
                    eval_episodes=2, episode_length=50, num_epochs=2, num_minibatches=2, buffer_capacity=4,
                    lag_depth=3, policy_hidden=(16,), value_hidden=(16,))
    trainer = make_train(config)
    traced = make_traced(config)
    init, chunk = jax.jit(trainer.init), jax.jit(trainer.run_chunk)

    def run(state, n):
        out = []
        for _ in range(n):
            state, m = chunk(state, traced)
            out.append(jax.device_get(m))
        return state, out

    key = jax.random.PRNGKey(0)
    full, full_metrics = run(init(key, traced), 4)
    half, _ = run(init(key, traced), 2)
    save_checkpoint(str(tmp_path), half, 2)
    restored, _, _ = restore_checkpoint(str(tmp_path), jax.eval_shape(trainer.init, key, traced))
    resumed, resumed_metrics = run(restored, 2)
    for a, b in zip(jax.tree.leaves((full, full_metrics[2:])), jax.tree.leaves((resumed, resumed_metrics))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.isfinite(float(full_metrics[-1].eval_return))


def test_a_runs_record_names_engine_and_model_and_refuses_another_model(tmp_path):
    import hashlib

    from vaco_jax.driver import provenance
    from vaco_jax.core.config import Config
    from vaco_jax.envs.gymnasium_tasks import model_path

    config = Config(env="Hopper-v4")
    record = config.as_record()
    with open(model_path(GYM_TASKS["Hopper-v4"]), "rb") as f:
        assert record["model_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert record["backend"] == "mujoco" and Config(env="hopper").as_record()["backend"] == "mjx"
    assert "gymnasium" in provenance.package_versions() and "mujoco" in provenance.package_versions()
    old = {"Hopper-v4/ppo_clip": {**record, "model_sha256": "0" * 64}}
    with pytest.raises(ConfigError, match="model_sha256"):
        provenance._compare_identity(str(tmp_path), old, {"Hopper-v4/ppo_clip": record})


def test_mujocos_batch_and_our_thread_pool_step_alike(monkeypatch):
    """Hopper-v4 steps through MuJoCo's batch; the same steps on our own thread pool (the path Humanoid
    takes) give the same bits."""
    env = make_env("Hopper-v4", episode_length=25)
    keys = jax.random.split(jax.random.PRNGKey(9), 2)
    eng = cengine.engine("Hopper-v4")
    assert eng.uses_batch
    batch = _rollout(env, keys)
    monkeypatch.setattr(eng, "uses_batch", False)
    loop = _rollout(env, keys)
    for a, b in zip(batch, loop):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_task_defaults_fill_only_the_settings_left_unset(monkeypatch):
    from conftest import study_module
    from vaco_jax.core import config as config_mod
    from vaco_jax.core.config import Config
    from vaco_jax.driver.train import train_args_class, with_task_defaults

    monkeypatch.setitem(config_mod.TASK_DEFAULTS, "Hopper-v4", {"num_envs": 16, "unroll_length": 128})
    assert Config.for_task("Hopper-v4").num_envs == 16
    assert Config.for_task("Hopper-v4", num_envs=32).num_envs == 32
    assert Config.for_task("hopper").num_envs == Config().num_envs
    # the train command line: a value left at the shown default takes the task's, a given one stays
    args = train_args_class()(env="Hopper-v4", num_envs=32)
    from vaco_jax.driver.cli import config_from_args
    config = with_task_defaults(config_from_args(args), True)
    assert (config.num_envs, config.unroll_length) == (32, 128)
    assert with_task_defaults(config_from_args(args), False).unroll_length == Config().unroll_length
    # the lag sweep: the task's defaults, then the preset's sizes (None: the task's), then flags
    lag_sweep = study_module("lag_sweep")
    args = lag_sweep.Args(preset="tiny", tasks=("Hopper-v4",))
    spec = {**lag_sweep.resolve(args), "num_envs": None}
    config = lag_sweep.base_config(args, spec, "Hopper-v4", "ppo_clip")
    assert (config.num_envs, config.unroll_length) == (16, spec["unroll_length"])


def test_every_task_runs_to_its_own_time_limit():
    """A task's episode length is its definition's ``max_episode_steps`` (Gymnasium's TimeLimit), so a
    task added to gymnasium_tasks.py brings its time limit with it; a setting given still wins."""
    from vaco_jax.core.config import TASK_DEFAULTS, Config

    for name, task in GYM_TASKS.items():
        assert TASK_DEFAULTS[name]["episode_length"] == task.max_episode_steps, name
    assert Config.for_task("Reacher-v4").episode_length == 50
    assert Config.for_task("Pusher-v5").episode_length == 100
    assert Config.for_task("Hopper-v4").episode_length == 1000
    assert Config.for_task("Reacher-v5", episode_length=20).episode_length == 20


def test_the_lag_sweep_keeps_a_tasks_time_limit_unless_one_is_given(tmp_path):
    import dataclasses

    from conftest import study_module

    ls = study_module("lag_sweep")
    args = ls.Args(preset="tiny", tasks=("Reacher-v4", "point_mass"), out=str(tmp_path / "run"))
    lengths = {g.config.env: g.config.episode_length for g in ls.plan(args, ls.resolve(args))}
    assert lengths == {"Reacher-v4": 50, "point_mass": 1000}
    args = dataclasses.replace(args, episode_length=30)
    assert {g.config.episode_length for g in ls.plan(args, ls.resolve(args))} == {30}


def test_task_defaults_are_the_settings_the_peer_check_ran():
    """Hopper-v4's defaults are what reached CleanRL's band: the committed peer-check record's settings."""
    import json
    import pathlib

    from vaco_jax.core.config import TASK_DEFAULTS, Config

    root = pathlib.Path(__file__).resolve().parent.parent
    from vaco_jax.driver.provenance import UNRECORDED_SETTINGS

    record = json.loads((root / "results" / "peer_check" / "Hopper-v4_vmapped16.json").read_text())["config"]
    record = {**UNRECORDED_SETTINGS, **record}  # a setting added after the record: its value then
    ours = Config.for_task("Hopper-v4", method="ppo_clip", lag_model="synchronous", eval_episodes=0,
                           total_env_steps=record["total_env_steps"], num_evals=record["num_evals"],
                           gae_lambda=0.95, clip_epsilon=0.2).as_record()
    assert set(TASK_DEFAULTS["Hopper-v4"]) <= set(ours)
    # a method option added after the record (None: the piece's default) changes nothing the record ran
    later = {k for k in ours if k not in record}
    assert all(ours[k] is None for k in later), {k: ours[k] for k in later}
    ours = {k: v for k, v in ours.items() if k not in later}
    assert {k: v for k, v in ours.items() if k != "policy_hidden" and k != "value_hidden"} == \
        {k: v for k, v in record.items() if k != "policy_hidden" and k != "value_hidden"}
    assert tuple(record["policy_hidden"]) == ours["policy_hidden"]


def test_the_solvers_warmstart_is_what_keeps_halfcheetah_equal_to_gymnasium():
    """Why the state carries qacc_warmstart: the same steps, each started from a zeroed warmstart (what
    a state without it gives), leave Gymnasium's HalfCheetah-v4 within 300 random-action steps."""
    genv = gymnasium.make("HalfCheetah-v4").unwrapped
    genv.reset(seed=0)
    model, data = genv.model, mujoco.MjData(genv.model)
    state = _gym_state(genv)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(300):
        action = rng.uniform(-1, 1, model.nu)
        genv.step(action)
        mujoco.mj_setState(model, data, state, SPEC)
        data.qacc_warmstart[:] = 0.0
        data.ctrl[:] = action
        mujoco.mj_step(model, data, genv.frame_skip)
        mujoco.mj_getState(model, data, state, SPEC)
        worst = max(worst, float(np.abs(data.qpos - genv.data.qpos).max()))
    assert worst > 1e-3, worst


@pytest.mark.parametrize("name", ["Hopper-v4", "HalfCheetah-v4"])
def test_a_batch_reset_equals_gymnasiums_reset_through_mujoco(name):
    """Tasks whose observation reads qpos and qvel alone reset in numpy from the model's default state
    row; the same noise through mj_resetData, qpos/qvel and mj_forward (Gymnasium's reset) gives the
    same state rows, positions and observations."""
    eng = cengine.engine(name)
    keys = np.random.default_rng(0).integers(0, 2 ** 32, (50, 2), dtype=np.uint64).astype(np.uint32)
    episodes = np.arange(50) % 7
    fast = eng.host_reset(keys, episodes)
    states = np.empty((50, eng.state_size))
    fields = eng._field_buffers(50)
    qpos, qvel = eng.reset_states(keys, episodes)
    data = mujoco.MjData(eng.model)
    for i in range(50):
        eng._reset_one(data, qpos[i], qvel[i], fields, i, states[i])
    np.testing.assert_array_equal(fast[0], states)
    np.testing.assert_array_equal(fast[1], eng._position(fields))
    np.testing.assert_array_equal(fast[2], eng._obs(fields))


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.parametrize("n", [1, 3])
def test_stepping_few_envs_reuses_one_batch_and_memory_stays_flat(n):
    """One env per cell (CleanRL's setting) once leaked a MuJoCo batch per step: the pool returned a
    one-row batch under its own thread count (1), never the one asked for (2), so every step built a new
    batch and kept it (~0.8 MB a step: 16 GB for 20k steps). Now the pool holds one batch per key and the
    process's resident memory does not grow with the steps."""
    eng = cengine.engine("Walker2d-v4")
    previous = cengine.threads()
    cengine.set_threads(2)
    try:
        keys = np.zeros((n, 2), np.uint32)
        states, position, _ = eng.host_reset(keys, np.zeros(n, np.int64))
        action = np.zeros((n, eng.nu))
        step = lambda s, p: eng.host_step(s, p, action, keys, np.zeros(n, np.int64),  # noqa: E731
                                          np.zeros(n, bool), auto_reset=True)[:2]
        for _ in range(50):  # warm-up: the pool's batches and numpy's buffers exist
            states, position = step(states, position)
        before = _resident_mib()
        for _ in range(2000):
            states, position = step(states, position)
        grown = _resident_mib() - before
        assert sum(len(v) for v in eng._batches.values()) <= 2, {k: len(v) for k, v in eng._batches.items()}
        assert grown < 100, f"resident memory grew {grown:.0f} MiB over 2,000 steps"
    finally:
        cengine.set_threads(previous)


def _gym_health_bounds(name: str, u) -> list[float]:
    """The finite bounds of a task's termination rule, read from the Gymnasium env's own attributes
    (``_healthy_z_range``, ``_healthy_angle_range``, ``_healthy_state_range``); the pendulums have none
    (their bounds are literals in Gymnasium's ``step``: |qpos[1]| > 0.2, tip height <= 1)."""
    bounds = {float(b) for attr in ("_healthy_z_range", "_healthy_angle_range", "_healthy_state_range")
              for b in getattr(u, attr, ()) if np.isfinite(b)}
    if name.startswith("InvertedPendulum"):
        bounds |= {-0.2, 0.2}
    if name.startswith("InvertedDoublePendulum"):
        bounds |= {1.0}
    return sorted(bounds)


def _probes(bounds: list[float]) -> list[float]:
    """Each bound itself, the floats either side of it, a little either side, and the non-finite values."""
    out = [np.nan, np.inf, -np.inf, 1e6, -1e6]
    for b in bounds:
        out += [b, np.nextafter(b, -np.inf), np.nextafter(b, np.inf), b - 1e-3, b + 1e-3]
    return out


@pytest.mark.parametrize("name", TASKS)
def test_termination_on_both_sides_of_every_bound_is_gymnasiums(name):
    """Each task's termination (``terminated(np, fields)``) against Gymnasium's own env on states set
    just inside, on and just outside every bound: every element of qpos and qvel in turn (the others at
    the model's initial state, which is healthy) takes each probe value, so z, the angle, each state
    element and the finiteness test are all probed, at the right index. Gymnasium's verdict is its
    ``step``'s ``terminated`` on that state, with the physics step itself disabled (Hopper's upper angle
    bound, 0.2, is never reached by random actions, so the step tests alone cannot see it flipped).
    InvertedDoublePendulum's rule reads the pole tip's height (``site_xpos``), probed there."""
    task = GYM_TASKS[name]
    genv = gymnasium.make(name)
    genv.reset(seed=0)
    u = genv.unwrapped
    u.do_simulation = lambda ctrl, n_frames: None  # step reads the state we set, unchanged
    zero = np.zeros(u.action_space.shape)
    q0, v0 = u.init_qpos.copy(), u.init_qvel.copy()
    nq = q0.size
    bounds = _gym_health_bounds(name, u)
    probes = _probes(bounds)
    site = isinstance(task, InvertedDoublePendulumTask)
    # (element index, value); the double pendulum: (0, the tip's height)
    cases = [(0, p) for p in probes] if site else [(i, p) for i in range(nq + v0.size) for p in probes]

    def gym_terminated(i, p):
        q, v = q0.copy(), v0.copy()
        if not site:
            (q if i < nq else v)[i if i < nq else i - nq] = p
        u.data.qpos[:], u.data.qvel[:] = q, v
        mujoco.mj_forward(u.model, u.data)
        if site:
            u.data.site_xpos[0, 2] = p
        fields = {"qpos": u.data.qpos[None].copy(), "qvel": u.data.qvel[None].copy()}
        for f in task.read_fields():
            fields[f] = np.asarray(getattr(u.data, f))[None].copy()
        with np.errstate(all="ignore"):
            terminated = u.step(zero)[2]
        return bool(terminated), fields

    gym, ours = [], []
    for i, p in cases:
        t, fields = gym_terminated(i, p)
        gym.append(t)
        with np.errstate(all="ignore"):
            ours.append(bool(np.asarray(task.terminated(np, fields))[0]))
    wrong = [(i, p, g, o) for (i, p), g, o in zip(cases, gym, ours) if g != o]
    assert not wrong, f"{name}: (element, value, Gymnasium's terminated, ours): {wrong[:10]}"
    if task.healthy is None and not site:
        assert not any(gym) and bounds == [], name  # never terminates
        return
    assert bounds and any(gym) and not all(gym), name
    # every bound is exercised: for some element the floats just either side of it disagree
    verdict = dict(zip(cases, gym))
    for b in bounds:
        lo, hi = np.nextafter(b, -np.inf), np.nextafter(b, np.inf)
        assert any(verdict[(i, lo)] != verdict[(i, hi)] for i in {i for i, _ in cases}), (name, b)


def test_each_auto_reset_starts_the_next_episode_from_its_own_start_state():
    """Forced auto-resets (``ends``) of one env in a row: the episode number goes up by one each time, the
    start states all differ, and each is ``host_reset`` of that episode number; an env not ending in the
    same batch keeps its episode number and its stepped state."""
    eng = cengine.engine("Hopper-v4")
    keys = np.array([[7, 11], [7, 12]], np.uint32)
    episodes = np.zeros(2, np.int64)
    states, position, obs = eng.host_reset(keys, episodes)
    starts = [obs[0].copy()]
    action = np.zeros((2, eng.nu))
    for k in range(1, 5):
        ends = np.array([True, False])
        out = eng.host_step(states, position, action, keys, episodes, ends, auto_reset=True)
        states, position, obs, next_obs, _, terminated, _, new_episodes = out
        assert not terminated.any()
        assert new_episodes.tolist() == [k, 0], new_episodes
        r_states, r_position, r_obs = eng.host_reset(keys[:1], new_episodes[:1])
        np.testing.assert_array_equal(states[0], r_states[0])
        np.testing.assert_array_equal(position[0], r_position[0])
        np.testing.assert_array_equal(obs[0], r_obs[0])
        np.testing.assert_array_equal(obs[1], next_obs[1])  # env 1 continues
        assert not np.array_equal(obs[0], next_obs[0])
        starts.append(obs[0].copy())
        episodes = new_episodes
    assert len({s.tobytes() for s in starts}) == len(starts), "two auto-resets started from the same state"


def test_a_nan_action_is_mujocos_alarm_counted_as_an_unstable_step():
    """MuJoCo zeroes a non-finite control and counts BADCTRL: the step is flagged unstable (so it ends
    the episode and is counted), not passed on as an ordinary step with a NaN reward."""
    eng = cengine.engine("Hopper-v4")
    keys = np.zeros((2, 2), np.uint32)
    states, position, _ = eng.host_reset(keys, np.zeros(2, np.int64))
    action = np.zeros((2, eng.nu))
    action[1, 0] = np.nan
    out = eng.host_step(states, position, action, keys, np.zeros(2, np.int64), np.zeros(2, bool), auto_reset=False)
    terminated, unstable = out[5], out[6]
    assert list(unstable) == [False, True] and list(terminated) == [False, True]


def test_a_c_engine_run_reports_its_unstable_steps_per_phase(tmp_path):
    from vaco_jax.core.config import Config
    from vaco_jax.driver import grid, runner

    config = Config(env="Hopper-v4", num_envs=4, unroll_length=16, total_env_steps=4 * 16 * 2, num_evals=2,
                    eval_episodes=1, num_epochs=1, num_minibatches=2)
    rows = runner.run_group(config, grid.grid([1], [0]), str(tmp_path / "g"), progress=False)
    assert rows[0]["unstable_steps"] == 0 and "mean_unstable_steps" not in rows[0]  # a count: the run's total
