"""Forward-lag sweep (docs/evaluation.md figure 5): epochs x minibatches per phase at a fixed backward lag.

The code is ``vaco_jax.studies.forward_lag``;
this file, ``vaco-forward-lag`` and ``python -m vaco_jax forward-lag`` run it (``--help``).
"""

from vaco_jax.studies.forward_lag import cli

if __name__ == "__main__":
    cli()
