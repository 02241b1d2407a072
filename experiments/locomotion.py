"""The locomotion lag-sweep study, run as the protocol fixed before it (``results/locomotion/protocol.json``,.

The code is ``vaco_jax.studies.locomotion``;
this file, ``vaco-locomotion`` and ``python -m vaco_jax locomotion`` run it (``--help``).
"""

from vaco_jax.studies.locomotion import cli

if __name__ == "__main__":
    cli()
