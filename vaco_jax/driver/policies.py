"""Trained policies kept on disk, and a one-line loader that returns a jitted act function.

Every finished group of a sweep writes ``GROUP/policies.npz`` (each cell's final learner policy,
value function and observation-normaliser statistics, with a checksum) next to ``GROUP/config.json`` (the group's
settings); a single run (``vaco-train``) is a one-cell group, ``OUT/<name>/<env>/<method>/``. Then::

    act = load_policy("runs/lag_sweep_demo", cell=6, group="Hopper-v4/vaco")  # or the group's directory
    action = act(observation)                     # the policy's mean, clipped to the action box
    action = act(observation, jax.random.key(0))  # a sample from the policy

``cell`` indexes the group's ``cells.json``.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from vaco_jax.analysis import results
POLICIES = "policies.npz"
CONFIG = "config.json"


def _flat(prefix: str, tree) -> dict:
    import jax

    return {prefix + jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def save_policies(directory: str, config, learner, normalizer) -> None:
    """Write ``config.json`` and ``policies.npz`` into ``directory``: every cell's final policy, value
    function and observation normaliser (leaves with a leading cell axis)."""
    os.makedirs(directory, exist_ok=True)
    results.write_json(os.path.join(directory, CONFIG), dataclasses.asdict(config))
    results.save_npz(os.path.join(directory, POLICIES), **_flat("policy", learner.policy_params),
                     **_flat("value", learner.value_params), **_flat("normalizer", normalizer))


def find_group(path: str, group: str | None = None) -> str:
    """The group directory holding ``config.json`` and ``policies.npz`` that ``path`` names: ``path``
    itself when it is a group directory, ``path/group``, or the only finished group under ``path`` (a
    study's run directory with one group, or vaco-train's ``OUT/<name>``). Anything else is a
    ConfigError saying what was found: no such directory, groups that have not finished, several groups
    (listed, to choose from)."""
    from vaco_jax.errors import ConfigError

    if not os.path.exists(path):
        raise ConfigError(f"{path}: no such directory (give a run directory or a group directory)")
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: not a directory (give a run directory or a group directory)")
    base = path
    if group:
        base = os.path.join(path, group)
        if not os.path.isdir(base):
            names = [os.path.relpath(g, path) for g in results.group_dirs(path)]
            raise ConfigError(f"group: {path} has no group {group!r} (its groups: {', '.join(names) or 'none'})")
    if any(os.path.exists(os.path.join(base, f)) for f in ("cells.json", CONFIG, POLICIES)):
        found = [base]  # a group directory
    else:
        found = results.group_dirs(base)
    done = [g for g in found if os.path.exists(os.path.join(g, POLICIES))]
    names = lambda dirs: ", ".join(os.path.relpath(g, path) for g in dirs)  # noqa: E731
    if len(done) > 1:
        raise ConfigError(f"{base} holds {len(done)} finished groups ({names(done)}); name one: its directory, or "
                          f"load_policy(..., group={os.path.relpath(done[0], path)!r}) / vaco-render --group GROUP")
    if not done:
        if not found:
            raise ConfigError(f"{base} holds no group (no cells.json under it); give a study's or vaco-train's run "
                              "directory, or a group directory")
        if len(found) > 1:
            raise ConfigError(f"{base}: none of its {len(found)} groups has finished ({names(found)}: no {POLICIES} "
                              "yet; run their command again to finish them)")
        (which,) = found
        if os.path.exists(os.path.join(which, "scores.csv")):
            raise results.ResultsError(f"{os.path.join(which, POLICIES)}: missing in a finished group (its trained "
                                       "policies); restore it, or delete the group directory to run it again")
        raise ConfigError(f"{which}: {POLICIES} is missing: the group has not finished (a group writes its trained "
                          "policies when its last chunk is done; run its command again to finish it)")
    (d,) = done
    if not os.path.exists(os.path.join(d, CONFIG)):
        raise results.ResultsError(f"{os.path.join(d, CONFIG)}: missing beside {POLICIES} (the settings that trained "
                                   "the policies); restore it")
    return d


def _config(directory: str):
    from vaco_jax.core.config import Config

    raw = results.read_json(os.path.join(directory, CONFIG))
    fields = {f.name for f in dataclasses.fields(Config)}
    values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k in fields}
    return Config(**values)


def load_policy(directory: str, cell: int = 0, group: str | None = None):
    """A jitted ``act(obs, key=None)`` of cell ``cell`` of a finished group: ``directory`` is the group's
    directory, or a run directory holding one finished group (vaco-train's ``OUT/<name>``), or a run
    directory and ``group``, the group under it (``"Hopper-v4/vaco"``, as ``vaco-render --group``); a run
    directory of several groups without ``group`` is a ConfigError listing them."""
    import jax
    import jax.numpy as jnp

    from vaco_jax.core.config import make_traced
    from vaco_jax.core.train import make_train

    directory = find_group(directory, group)
    config = _config(directory)
    arrays = results.load_npz(os.path.join(directory, POLICIES))
    trainer = make_train(config)
    template = jax.eval_shape(trainer.init, jax.random.PRNGKey(0), make_traced(config))
    cells = next(iter(arrays.values())).shape[0]
    if not 0 <= cell < cells:
        raise results.ResultsError(f"{directory}: cell {cell} is not among its {cells} cell(s)")

    def fill(prefix, tree):
        paths = jax.tree_util.tree_flatten_with_path(tree)[0]
        treedef = jax.tree_util.tree_structure(tree)
        leaves = []
        for path, _ in paths:
            name = prefix + jax.tree_util.keystr(path)
            if name not in arrays:
                raise results.ResultsError(f"{directory}/{POLICIES}: {name} is missing")
            leaves.append(jnp.asarray(arrays[name][cell]))
        return jax.tree_util.tree_unflatten(treedef, leaves)

    params = fill("policy", template.learner.policy_params)
    normalizer = fill("normalizer", template.normalizer)
    env = trainer.env
    _act = policy_act(trainer, config)
    obs_size = env.observation_size

    def act(obs, key=None):
        shape = np.shape(obs)
        if not shape or shape[-1] != obs_size:
            raise ValueError(f"act: obs has shape {shape}; {config.env} observations have shape ({obs_size},) "
                             f"(or (batch, {obs_size}))")
        return _act(params, normalizer, obs, key)

    return act


def policy_act(trainer, config):
    """A jitted ``act(policy_params, normalizer, obs, key)`` of one cell's policy: the mean action (``key``
    None) or a sample, clipped to the action box. ``load_policy`` binds it to a saved cell, and
    ``--capture-video`` (driver/tracking.py) to a training cell's current one."""
    import jax
    import jax.numpy as jnp

    from vaco_jax.core.networks import normalize

    env = trainer.env

    @jax.jit
    def act(params, normalizer, obs, key):
        x = normalize(normalizer, jnp.asarray(obs, jnp.float32), config.normalize_observations)
        mean, log_std = trainer.nets.policy_apply(params, x)
        if key is not None:
            mean = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return jnp.clip(mean, env.action_low, env.action_high)

    return act
