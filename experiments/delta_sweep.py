"""VACO's TV budget δ (docs/surrogates.md): δ x lag depth x seeds, plus the options that explain the result.

The code is ``vaco_jax.studies.delta_sweep``;
this file, ``vaco-delta-sweep`` and ``python -m vaco_jax delta-sweep`` run it (``--help``).
"""

from vaco_jax.studies.delta_sweep import cli

if __name__ == "__main__":
    cli()
