"""Rebuild the documents made from the committed results (docs/evaluation.md, "Docs rebuilt from results").

The code is ``vaco_jax.studies.rebuild_docs``; this file runs it on this repository (``--help``).
"""

import os

from vaco_jax.studies.rebuild_docs import cli

if __name__ == "__main__":
    cli(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
