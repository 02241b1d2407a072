"""The evidence study (docs/evaluation.md, "The study"): the claims of the three papers, settled on.

The code is ``vaco_jax.studies.study``;
this file, ``vaco-study`` and ``python -m vaco_jax study`` run it (``--help``).
"""

from vaco_jax.studies.study import cli

if __name__ == "__main__":
    cli()
