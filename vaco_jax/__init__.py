"""vaco_jax: asynchronous on-policy RL on MuJoCo (MJX) with controlled policy lag.

``vaco_jax.METHODS`` maps each method name to its preset (four piece classes: advantage estimator,
proximal-policy source, surrogate, sample filter). ``vaco_jax.core.train.make_train(Config(...))`` builds
the trainer. Importing the package imports nothing heavy: ``vaco_jax.analysis.results``, ``stats``,
``tables`` and ``figures`` read run directories without jax; ``METHODS`` loads the trainer's
modules on first use.
"""

__all__ = ["METHODS"]


def __getattr__(name):
    if name == "METHODS":
        from vaco_jax.core.methods import METHODS

        return METHODS
    raise AttributeError(f"module 'vaco_jax' has no attribute {name!r}")
