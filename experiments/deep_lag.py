"""Which real actor-learner configurations realise deep lag (docs/real_async.md, "Deep lag").

The code is ``vaco_jax.studies.deep_lag``; this file runs it (``--help``).
"""

from vaco_jax.studies.deep_lag import cli

if __name__ == "__main__":
    cli()
