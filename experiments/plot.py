"""Regenerate every figure of a run directory from the files on disk (docs/evaluation.md).

The code is ``vaco_jax.studies.plot``;
this file, ``vaco-plot`` and ``python -m vaco_jax plot`` run it (``--help``).
"""

from vaco_jax.studies.plot import cli

if __name__ == "__main__":
    cli()
