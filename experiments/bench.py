"""A new fix through the step size x lag study's committed protocol in one command (``--dry-run`` first).

The code is ``vaco_jax.studies.bench``;
this file, ``vaco-bench`` and ``python -m vaco_jax bench`` run it (``--help``).
"""

from vaco_jax.studies.bench import cli

if __name__ == "__main__":
    cli()
