"""The MuJoCo lag sweep (docs/evaluation.md): methods x lag depths x seeds x tasks -> scores, statistics, figures.

The code is ``vaco_jax.studies.lag_sweep``;
this file, ``vaco-lag-sweep`` and ``python -m vaco_jax lag-sweep`` run it (``--help``).
"""

from vaco_jax.studies.lag_sweep import cli

if __name__ == "__main__":
    cli()
