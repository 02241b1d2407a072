"""The locomotion study's pilot (tuning seeds; not part of the study): how much lag hurts a tuned PPO-Clip.

The code is ``vaco_jax.studies.locomotion_pilot``;
this file, ``vaco-locomotion-pilot`` and ``python -m vaco_jax locomotion-pilot`` run it (``--help``).
"""

from vaco_jax.studies.locomotion_pilot import cli

if __name__ == "__main__":
    cli()
