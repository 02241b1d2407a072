"""The evidence issue's decision rule: a verdict per claim from a run directory's scores (vaco_jax/analysis/claims.py).

The code is ``vaco_jax.studies.claims``;
this file, ``vaco-claims`` and ``python -m vaco_jax claims`` run it (``--help``).
"""

from vaco_jax.studies.claims import cli

if __name__ == "__main__":
    cli()
