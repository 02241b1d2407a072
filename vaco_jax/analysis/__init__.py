"""Reading results and computing from them: ``results`` (the run directory, checksummed; no jax),
``stats`` (bootstrap, IQM, rliable aggregates), ``tables`` (summaries), ``rules`` and ``claims``
(decision rules), ``figures`` (draws only what the tables computed)."""
