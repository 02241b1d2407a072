"""Training–inference mismatch (docs/lag.md): actor precision x old-logit source, with the cost of recovery.

The code is ``vaco_jax.studies.mismatch``;
this file, ``vaco-mismatch`` and ``python -m vaco_jax mismatch`` run it (``--help``).
"""

from vaco_jax.studies.mismatch import cli

if __name__ == "__main__":
    cli()
