"""vaco_jax: asynchronous on-policy RL on MuJoCo (MJX) with controlled policy lag.

The layout (docs/architecture.md): ``vaco_jax.core`` is the trainer (``make_train(Config(...))``, pure
and vmappable), ``vaco_jax.envs`` the tasks and their engines, ``vaco_jax.driver`` the host side (grids,
the group runner, studies, commands), ``vaco_jax.analysis`` what reads run directories (results,
statistics, tables, figures; no jax).

The names most code needs are here: ``Config``, ``make_traced``, ``stack_traced``, ``make_train``,
``METHODS`` (each method's preset: advantage estimator, proximal source, surrogate, sample filter),
``run`` (one configuration into a run directory), ``load_policy``, and ``write_table`` /
``read_table`` (a results table with its checksum, and the verified read of one). Importing the package imports
nothing heavy; each name loads its module on first use.
"""

_EXPORTS = {
    "Config": "vaco_jax.core.config", "make_traced": "vaco_jax.core.config", "stack_traced": "vaco_jax.core.config",
    "make_train": "vaco_jax.core.train", "METHODS": "vaco_jax.core.methods", "run": "vaco_jax.driver.train",
    "load_policy": "vaco_jax.driver.policies", "ConfigError": "vaco_jax.errors",
    "write_table": "vaco_jax.analysis.results", "read_table": "vaco_jax.analysis.results",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'vaco_jax' has no attribute {name!r}")
