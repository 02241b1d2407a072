"""Screens before the study (docs/evaluation.md, "Choosing tasks"): which tasks are learnable and.

The code is ``vaco_jax.studies.screen``;
this file, ``vaco-screen`` and ``python -m vaco_jax screen`` run it (``--help``).
"""

from vaco_jax.studies.screen import cli

if __name__ == "__main__":
    cli()
