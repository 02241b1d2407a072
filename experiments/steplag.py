"""The step size x lag study, run as the protocol fixed before it (``results/steplag/protocol.json``).

The code is ``vaco_jax.studies.steplag``;
this file, ``vaco-steplag`` and ``python -m vaco_jax steplag`` run it (``--help``).
"""

from vaco_jax.studies.steplag import cli

if __name__ == "__main__":
    cli()
