"""vaco_jax: asynchronous on-policy RL on MuJoCo (MJX) with controlled policy lag.

``vaco_jax.METHODS`` maps each method name to its preset (advantage estimator, proximal-policy
source, surrogate, sample filter). ``vaco_jax.train.make_train(Config(...))`` builds the trainer.
"""

from vaco_jax.methods import METHODS

__all__ = ["METHODS"]
