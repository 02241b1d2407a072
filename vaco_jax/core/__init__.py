"""The trainer: pure functions of a configuration (knobs, config, pieces, methods, advantages, proximal
sources, objectives, lag, rollout, update, networks) and the ``Trainer`` that composes them.

Nothing here reads or writes files; everything below the driver imports only downward (``envs``).
"""
