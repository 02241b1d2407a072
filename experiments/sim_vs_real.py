"""Does the simulator predict a real asynchronous actor-learner? (docs/real_async.md).

The code is ``vaco_jax.studies.sim_vs_real``;
this file, ``vaco-sim-vs-real`` and ``python -m vaco_jax sim-vs-real`` run it (``--help``).
"""

from vaco_jax.studies.sim_vs_real import cli

if __name__ == "__main__":
    cli()
