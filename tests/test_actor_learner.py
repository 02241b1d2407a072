"""The real asynchronous actor–learner (driver/actor_learner.py): a short run's record is consistent —
every batch an actor produced is in it exactly once, no behaviour version is ahead of the learner's,
the age histogram is the consumed samples' ages — in both modes, and bad settings are one line."""

import collections
import os
import re

import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.core.config import ConfigError
from vaco_jax.driver.actor_learner import RealSettings, run_real

SAMPLES = 2 * 16  # envs per actor x unroll length (8 envs over 4 actors)


def _config(**kw):
    return tiny_config(**{**dict(num_envs=8, total_env_steps=8 * 16 * 12, num_evals=3, eval_episodes=2), **kw})


def _check_record(run, settings, capacity):
    rows = run.record
    keys = [(r["actor"], r["rollout"]) for r in rows]
    assert len(keys) == len(set(keys)), "a batch recorded twice"
    by_actor = collections.defaultdict(list)
    for a, i in keys:
        by_actor[a].append(i)
    for a, indices in by_actor.items():  # every batch an actor queued is there: 0, 1, ..., n-1
        assert sorted(indices) == list(range(len(indices))), (a, sorted(indices))
    consumed = [r for r in rows if r["fate"] == "consumed"]
    assert len(consumed) == run.updates * settings.per_update()
    assert run.env_steps == len(consumed) * SAMPLES
    for r in consumed:
        assert 0 <= r["behaviour_version"] <= r["learner_version"] and r["age"] < capacity
        assert r["age"] == r["learner_version"] - r["behaviour_version"]
        assert r["started_s"] <= r["queued_s"] <= r["taken_s"]
    per_update = collections.Counter(r["learner_version"] for r in consumed)
    assert set(per_update.values()) == {settings.per_update()} and sorted(per_update) == list(range(run.updates))
    expected = np.bincount([r["age"] for r in consumed], minlength=capacity) * SAMPLES
    np.testing.assert_array_equal(run.ages, expected)
    for r in rows:
        assert r["fate"] in ("consumed", "dropped: older than the buffer", "left in the queue")
        if r["fate"].startswith("dropped"):
            assert r["age"] >= capacity
    # a version is only ever sent after the learner published it: versions an actor used never decrease
    for a in by_actor:
        versions = [r["behaviour_version"] for r in sorted(rows, key=lambda r: r["rollout"]) if r["actor"] == a]
        assert versions == sorted(versions)
    assert [c["update"] for c in run.curve] == [run.updates // 3 * k for k in (1, 2, 3)] and all(np.isfinite(c["eval_return"]) for c in run.curve)


def test_an_asynchronous_run_accounts_for_every_batch_and_its_ages():
    settings = RealSettings(num_actors=4, slowdown=(1, 1, 2, 3), queue_capacity=2)
    run = run_real(_config(buffer_capacity=16), settings, seed=0)
    _check_record(run, settings, 16)
    assert run.updates == 12 and run.env_steps_per_second > 0


def test_a_buffer_of_one_version_drops_every_older_batch_counts_it_and_never_stalls(monkeypatch):
    """A healthy run drops at most num_actors + queue_capacity batches in a row (those made before the
    learner's last publication), and the stall counter starts again at every batch taken: with the stall
    bound at exactly that, a run that drops more than it in all completes."""
    from vaco_jax.driver import actor_learner

    monkeypatch.setattr(actor_learner, "STALL_FACTOR", 1)
    settings = RealSettings(num_actors=4, slowdown=(1, 1, 1, 4), queue_capacity=4, batches_per_update=2)
    run = run_real(_config(buffer_capacity=1), settings, seed=1)
    _check_record(run, settings, 1)
    assert run.ages[0] == run.env_steps
    # 4 actors, 2 batches an update: every update drops some, far more than the bound over the run
    assert sum(r["fate"].startswith("dropped") for r in run.record) > 4 + 4


def test_the_synchronous_mode_takes_one_fresh_batch_from_every_actor():
    settings = RealSettings(num_actors=4, queue_capacity=1, mode="sync")
    run = run_real(_config(buffer_capacity=4), settings, seed=2)
    _check_record(run, settings, 4)
    assert run.ages[0] == run.env_steps and run.ages[1:].sum() == 0
    for v in range(run.updates):
        actors = sorted(r["actor"] for r in run.record if r["fate"] == "consumed" and r["learner_version"] == v)
        assert actors == [0, 1, 2, 3]


@pytest.mark.parametrize("fields, message", [
    (dict(num_actors=3), "num_envs=8 must be a multiple of num_actors=3"),
    (dict(num_actors=0), "num_actors=0 must be a positive integer"),
    (dict(num_actors=2, slowdown=(1.0,)), "slowdown=(1.0,): one factor >= 1 per actor (2)"),
    (dict(num_actors=2, slowdown=(1.0, 0.5)), "one factor >= 1 per actor"),
    (dict(num_actors=2, queue_capacity=0), "queue_capacity=0 must be a positive integer"),
    (dict(num_actors=2, mode="lockstep"), "mode='lockstep'; allowed values: async, sync"),
    (dict(num_actors=2, mode="sync", batches_per_update=1), "mode='sync' takes one batch from every actor"),
    (dict(num_actors=2, publish_interval=0), "publish_interval=0 must be a positive integer"),
    (dict(num_actors=2, mode="sync", publish_interval=4), "mode='sync' publishes every update"),
    # more than the buffer: the actors' version leaves the learner's buffer and nothing new is published
    (dict(num_actors=2, publish_interval=9), "publish_interval=9 must be at most buffer_capacity=8"),
    # 0 is not "every actor" (that is None, the default); a bool or a float is not a count
    (dict(num_actors=2, batches_per_update=0), "batches_per_update=0 must be a positive integer (or None: one "
                                                "from every actor)"),
    (dict(num_actors=True), "num_actors=True must be a positive integer"),
    (dict(num_actors=2, queue_capacity=False), "queue_capacity=False must be a positive integer"),
    (dict(num_actors=2, batches_per_update=True), "batches_per_update=True must be a positive integer"),
    (dict(num_actors=2, publish_interval=2.0), "publish_interval=2.0 must be a positive integer"),
    (dict(num_actors=2, slowdown="12"), "slowdown='12': one factor >= 1 per actor (2)"),
    (dict(num_actors=2, slowdown=(True, 2.0)), "slowdown=(True, 2.0): one factor >= 1 per actor"),
    (dict(num_actors=2, slowdown=(1.0, float("inf"))), "one factor >= 1 per actor"),
    (dict(num_actors=2, mode=["sync"]), "mode=['sync']; allowed values: async, sync"),
])
def test_bad_settings_are_one_line_before_anything_compiles(fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        run_real(_config(), RealSettings(**fields))
    assert "\n" not in str(e.value)


def test_none_batches_per_update_is_one_batch_from_every_actor():
    assert RealSettings(num_actors=3).per_update() == 3
    assert RealSettings(num_actors=3, batches_per_update=1).per_update() == 1


@pytest.mark.parametrize("seed", [-1, 2 ** 33, 2 ** 32, True, 1.5, "0"])
def test_a_seed_is_checked_as_a_training_run_checks_it(seed, monkeypatch):
    """The same rule and message as ``vaco_jax.run``'s (a PRNG key holds a seed modulo 2^32: -1 and
    2^33 would reuse another seed's key), before anything compiles."""
    from vaco_jax.driver import actor_learner, grid

    monkeypatch.setattr(actor_learner, "make_train", lambda *a: pytest.fail("compiled before the seed was checked"))
    with pytest.raises(ConfigError) as mine:
        run_real(_config(), RealSettings(num_actors=2), seed=seed)
    with pytest.raises(ConfigError) as theirs:
        grid.check_cells([grid.Cell(1, seed)])
    assert str(mine.value) == str(theirs.value) == (f"seed={seed!r} is not allowed; a seed must be an integer in "
                                                     f"[0, {2 ** 32 - 1}]")


def test_a_real_run_trains_and_scores_the_simulators_phases():
    """13 updates' worth of env steps in 3 evaluation chunks: the simulator runs 3 chunks of 4 phases
    and leaves the 13th untrained; the real run does the same, so both are scored at the same steps."""
    config = _config(total_env_steps=8 * 16 * 13)
    run = run_real(config, RealSettings(num_actors=2, queue_capacity=2, mode="sync"), seed=0)
    assert run.updates == config.phases_run == 12
    assert [c["env_steps"] for c in run.curve] == [4 * k * 8 * 16 for k in (1, 2, 3)]


def test_a_publish_interval_realises_deep_lag_and_the_record_stays_complete():
    """The learner publishes every 8th version: a batch made between publications is up to 7 versions
    old when the learner takes it, whatever the threads' timing (the i-th batch consumed after a
    publication is at least i versions old), so ages above 4 are realised; every batch is still in the
    record exactly once."""
    settings = RealSettings(num_actors=4, queue_capacity=2, batches_per_update=1, publish_interval=8)
    run = run_real(_config(buffer_capacity=16, total_env_steps=SAMPLES * 24), settings, seed=3)
    _check_record(run, settings, 16)
    consumed = [r for r in run.record if r["fate"] == "consumed"]
    assert run.updates == 24 and {r["behaviour_version"] % 8 for r in consumed} == {0}  # only published versions
    assert max(r["age"] for r in consumed) >= 7 and run.ages[5:].sum() > 0


def test_a_deep_queue_keeps_every_batch_accounted_for():
    settings = RealSettings(num_actors=4, queue_capacity=8, batches_per_update=1)
    run = run_real(_config(buffer_capacity=16, total_env_steps=SAMPLES * 24), settings, seed=4)
    _check_record(run, settings, 16)
    assert run.updates == 24


def test_a_run_records_how_loaded_the_machine_was():
    run = run_real(_config(), RealSettings(num_actors=2, queue_capacity=2), seed=5)
    assert set(run.load) == {"start", "end"} and all(v is None or v >= 0 for v in run.load.values())


def test_a_written_run_carries_every_files_checksum_and_its_histogram_reads_back_verified(tmp_path):
    """``write_real_run`` (no training: a made-up run) writes the age histogram with its checksum beside it,
    as the tables; the studies read it back verified, and an edited count is one line naming the file."""
    from vaco_jax.analysis.results import ResultsError
    from vaco_jax.driver.actor_learner import RealRun, write_real_run
    from vaco_jax.driver.histogram import read_age_histogram
    from vaco_jax.studies.kit_real import record_histogram, run_histogram

    record = [{"actor": a, "rollout": 0, "behaviour_version": 0, "started_s": 0.0, "queued_s": 0.1,
               "learner_version": a, "age": a, "taken_s": 0.2, "samples": SAMPLES, "fate": "consumed"} for a in (0, 2)]
    run = RealRun(record, [{"update": 2, "env_steps": 64, "seconds": 1.0, "eval_return": 3.0}],
                  np.array([SAMPLES, 0, SAMPLES, 0]), 1.0, 2 * SAMPLES, 2, [])
    where = str(tmp_path / "run")
    write_real_run(where, run, _config(), RealSettings(num_actors=4), seed=0)
    assert sorted(os.listdir(where)) == ["age_histogram.csv", "age_histogram.csv.sha256", "curve.csv",
                                         "curve.csv.sha256", "record.csv", "record.csv.sha256", "score.json"]
    expected = (float(SAMPLES), 0.0, float(SAMPLES))
    assert read_age_histogram(os.path.join(where, "age_histogram.csv"), checksum=True) == expected
    assert run_histogram(where) == record_histogram(where) == expected
    os.remove(os.path.join(where, "age_histogram.csv.sha256"))  # a run written before histograms had one:
    assert run_histogram(where, checksum=False) == expected  # checked against its record instead
    path = os.path.join(where, "age_histogram.csv")
    text = open(path).read()
    open(path, "w").write(text.replace(f"2,{SAMPLES}", f"2,{SAMPLES + 1}"))
    with pytest.raises(ResultsError, match="its counts differ from the consumed batches of the record.csv"):
        run_histogram(where, checksum=False)
    with pytest.raises(ResultsError, match="no checksum"):
        run_histogram(where)


def _learner_cfg(config, settings):
    """The configuration ``run_real`` gives its learner (and keys its compiled pieces on)."""
    from vaco_jax.driver.actor_learner import _learner_config

    cfg = _learner_config(config)
    per_actor = cfg.num_envs // settings.num_actors
    return cfg.replace(num_envs=per_actor * settings.per_update(), envs_per_actor=per_actor)


def test_compiled_pieces_are_kept_per_learner_configuration_and_what_its_names_resolve_to(monkeypatch):
    """``pieces`` only wraps functions in ``jax.jit`` (nothing is traced here): one entry per learner
    configuration, another for any field that shapes the programs, for a task registered again under
    its name, and at most ``PIECES_KEPT`` entries; the evaluation is the task's shared program."""
    from vaco_jax.driver import actor_learner
    from vaco_jax.envs import PointMass, register_env

    monkeypatch.setattr(actor_learner, "_PIECES", type(actor_learner._PIECES)())
    monkeypatch.setattr(actor_learner, "PIECES_KEPT", 100)
    learner = _learner_cfg(_config(), RealSettings(num_actors=2))
    first = actor_learner.pieces(learner)
    assert actor_learner.pieces(learner) is first and actor_learner.pieces(learner.replace()) is first
    other = actor_learner.pieces(learner.replace(method="vaco"))
    assert other is not first and other.evaluate is first.evaluate  # the evaluation reads no method
    for change in (dict(envs_per_actor=2, num_envs=4), dict(unroll_length=8), dict(total_env_steps=8 * 16 * 24),
                   dict(gamma=0.9), dict(policy_hidden=(8,))):
        assert actor_learner.pieces(learner.replace(**change)) is not first, change
    register_env("point_mass_real", lambda backend: PointMass())
    again = learner.replace(env="point_mass_real")
    kept = actor_learner.pieces(again)
    assert actor_learner.pieces(again) is kept
    register_env("point_mass_real", lambda backend: PointMass())  # the name now means another env object
    assert actor_learner.pieces(again) is not kept
    monkeypatch.setattr(actor_learner, "PIECES_KEPT", 3)
    actor_learner.pieces(learner.replace(unroll_length=4))  # one more: only the newest 3 are kept
    assert len(actor_learner._PIECES) == 3 and actor_learner.pieces(learner) is not first


def test_every_seed_of_a_configuration_runs_the_same_programs_with_its_own_key(monkeypatch):
    """Two seeds run the same jitted pieces, each traced once; the run's key is an argument of the
    learner's update (its minibatch order), not a constant of the run that built the pieces: two keys
    give two updates of one state, one key the same update twice."""
    import jax

    from vaco_jax.driver import actor_learner

    used = []
    build = actor_learner.pieces
    monkeypatch.setattr(actor_learner, "pieces", lambda cfg: used.append(build(cfg)) or used[-1])
    settings = RealSettings(num_actors=2, queue_capacity=2)  # test_a_run_records_how_loaded_the_machine_was's
    for seed in (5, 6):
        run_real(_config(), settings, seed=seed)
    compiled = used[0]
    assert used[1] is compiled
    assert [f._cache_size() for f in (compiled.act, compiled.scale, compiled.learn, compiled.reset)] == [1] * 4
    trainer = compiled.trainer
    state = trainer.init(jax.random.PRNGKey(5), compiled.traced)
    snapshot = trainer.snapshot(state.learner.policy_params, state.normalizer)
    _, traj = compiled.act(compiled.reset(jax.random.PRNGKey(0)), snapshot, 0, jax.random.PRNGKey(1))

    def update(seed):
        learner = compiled.learn(jax.random.PRNGKey(seed), state.learner, state.normalizer, state.buffer,
                                 (traj, traj), 0)[0]
        return np.concatenate([np.ravel(x) for x in jax.tree.leaves(learner.policy_params)])

    np.testing.assert_array_equal(update(5), update(5))
    assert not np.array_equal(update(5), update(6))
