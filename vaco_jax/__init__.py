"""vaco_jax: asynchronous on-policy RL on MuJoCo (MJX) with controlled policy lag."""
