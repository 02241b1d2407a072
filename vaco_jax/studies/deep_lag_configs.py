"""The deep-lag study's declarations: the real configurations its pilot compares, the targets and
tolerance of its rule, its synchronous reference, the presets of the pilot and the numbers of the study
(docs/real_async.md, "Deep lag"), and ``config_of``, which turns a configuration into the training
``Config`` and the actor-learner's ``RealSettings``. It imports no study: ``deep_lag``, its pilot
(``deep_lag_pilot``) and its stages (``deep_lag_study``) read it.
"""

from __future__ import annotations

from vaco_jax.core.config import ConfigError

TARGETS = (4.0, 16.0)  # mean ages of the simulator's B = 8 (3.5) and B = 32 (15.5), rounded up
TOLERANCE = 0.25  # a configuration qualifies for a target when |mean age / target - 1| <= this
STEADY_FROM = 32  # learner versions from which any age the buffer holds (32) can occur

# (name, family, RealSettings fields, envs per actor). Hopper-v4's update takes 16 envs x 128 steps: a
# deep-queue actor steps all 16 (the update's batch is one actor's), a publish-interval actor 4 of them.
CONFIGURATIONS = (
    ("queue2x4", "queue", dict(num_actors=2, queue_capacity=4, batches_per_update=1), 16),
    ("queue4x4", "queue", dict(num_actors=4, queue_capacity=4, batches_per_update=1), 16),
    ("queue2x16", "queue", dict(num_actors=2, queue_capacity=16, batches_per_update=1), 16),
    ("queue4x16", "queue", dict(num_actors=4, queue_capacity=16, batches_per_update=1), 16),
    ("publish8", "publish", dict(num_actors=4, queue_capacity=4, publish_interval=8), 4),
    ("publish31", "publish", dict(num_actors=4, queue_capacity=4, publish_interval=31), 4),
)

PRESETS = {
    # Hopper-v4 at the locomotion study's settings (its task defaults), the first study's B = 1 tuning
    "cpu": dict(task="Hopper-v4", methods=("ppo_clip", "vaco"), knobs={"ppo_clip": {"clip_epsilon": 0.2},
                                                                      "vaco": {"tv_budget": 0.06}},
                pilot_seeds=(0,), pilot_env_steps=96 * 2048, num_evals=2, eval_episodes=2, buffer_capacity=32,
                sizes={}, steady_from=STEADY_FROM),
    # the tiny pure-JAX task, for tests: seconds
    "tiny": dict(task="point_mass", methods=("ppo_clip", "vaco"), knobs={}, pilot_seeds=(0,),
                 pilot_env_steps=24 * 8 * 16, num_evals=2, eval_episodes=2, buffer_capacity=32,
                 sizes=dict(unroll_length=16, episode_length=50, num_epochs=1, num_minibatches=2), steady_from=4),
}


# The study's synchronous reference, in CONFIGURATIONS' form: the sim-vs-real layout in lockstep (Hopper-v4's
# update of 16 envs: 4 actors x 4 envs, one batch from each)
LOCKSTEP = ("lockstep", "sync", dict(num_actors=4, queue_capacity=4, mode="sync"), 4)

# Every number of the study (real, sim, report), fixed before its first run (OUT/study_protocol.json)
STUDY = {
    "cpu": dict(real_seeds=tuple(range(20)), sim_seeds=tuple(range(1000, 1040)), control_seeds=tuple(range(1000, 1010)),
                total_env_steps=1_000_000, num_evals=10, eval_episodes=8, buffer_capacity=32,
                control_shift=8, margin=0.15, confidence=0.90, bootstrap_reps=2000, return_threshold=1000.0),
    # point_mass, for tests: 16 updates of 8 envs x 16 steps
    "tiny": dict(real_seeds=(0, 1), sim_seeds=(1000, 1001), control_seeds=(1000, 1001), total_env_steps=16 * 8 * 16,
                 num_evals=2, eval_episodes=2, buffer_capacity=32, control_shift=8, margin=0.15, confidence=0.90,
                 bootstrap_reps=2000, return_threshold=40.0),
}


def settings_of(name: str):
    """The ``RealSettings`` of one of the pilot's ``CONFIGURATIONS``; a ConfigError naming them otherwise."""
    from vaco_jax.driver.actor_learner import RealSettings

    for n, _, fields, _ in CONFIGURATIONS:
        if n == name:
            return RealSettings(**fields)
    raise ConfigError(f"configurations: {name!r}; allowed values: {', '.join(c[0] for c in CONFIGURATIONS)}")


def layout(name: str) -> tuple:
    """A configuration's row (``CONFIGURATIONS`` or ``LOCKSTEP``)."""
    for row in CONFIGURATIONS + (LOCKSTEP,):
        if row[0] == name:
            return row
    settings_of(name)  # the pilot's names in the error
    raise AssertionError(name)


def config_of(spec: dict, name: str, method: str, study: dict | None = None):
    """The training settings of one configuration: the update's batch is the simulator's shape
    (``envs_per_actor x batches_per_update`` envs), every actor together stepping ``num_envs``.
    ``study``: the study's numbers (``STUDY``: env steps, evaluations, buffer) instead of the pilot's."""
    from vaco_jax.core.config import Config
    from vaco_jax.driver.actor_learner import RealSettings

    _, _, fields, per_actor = layout(name)
    settings = RealSettings(**fields)
    numbers = study or dict(total_env_steps=spec["pilot_env_steps"], num_evals=spec["num_evals"],
                            eval_episodes=spec["eval_episodes"], buffer_capacity=spec["buffer_capacity"])
    sizes = dict(spec["sizes"])
    if spec["task"] != "point_mass":
        base = Config.for_task(spec["task"], method=method)
        if per_actor * settings.per_update() != base.num_envs:
            raise ConfigError(f"{name}: {per_actor} envs x {settings.per_update()} batches per update is not the "
                              f"task's update of {base.num_envs} envs")
    else:
        per_actor = 8 // settings.per_update()
    config = Config.for_task(spec["task"], method=method, total_env_steps=numbers["total_env_steps"],
                             num_evals=numbers["num_evals"], eval_episodes=numbers["eval_episodes"],
                             buffer_capacity=numbers["buffer_capacity"],
                             **{**sizes, "num_envs": per_actor * settings.num_actors}, **spec["knobs"].get(method, {}))
    settings.check(config)
    return config, settings
