"""The studies: each module is one experiment with its command line (``cli``), run as
``python experiments/<name>.py``, ``vaco-<name>`` (installed) or ``python -m vaco_jax <name>``.

COMMANDS maps each command name to its module and what it does; ``vaco_jax.__main__`` and the
installed scripts (pyproject.toml, checked against it by the tests) read it. Importing this package
imports no study (and no jax).
"""

COMMANDS = {
    "lag-sweep": ("vaco_jax.studies.lag_sweep", "the main job: methods x lag depths x seeds x tasks -> scores, figures"),
    "plot": ("vaco_jax.studies.plot", "redraw every figure of a run directory from the files on disk"),
    "locomotion": ("vaco_jax.studies.locomotion", "the locomotion study under its frozen protocol (plan, run, report)"),
    "steplag": ("vaco_jax.studies.steplag", "the step size x lag study under its protocol (plan, run, report)"),
    "bench": ("vaco_jax.studies.bench", "a new fix through the step size x lag study's committed protocol"),
    "study": ("vaco_jax.studies.study", "the pendulum-suite evidence study (tune, then the designs)"),
    "claims": ("vaco_jax.studies.claims", "the decision rule: a verdict per claim from a study's scores"),
    "screen": ("vaco_jax.studies.screen", "which tasks are learnable and lag-sensitive on a budget"),
    "forward-lag": ("vaco_jax.studies.forward_lag", "epochs x minibatches per phase at a fixed backward lag"),
    "delta-sweep": ("vaco_jax.studies.delta_sweep", "VACO's TV budget x lag depth x seeds"),
    "mismatch": ("vaco_jax.studies.mismatch", "actor precision x old-logit source (training-inference mismatch)"),
    "sim-vs-real": ("vaco_jax.studies.sim_vs_real", "the simulator against a real asynchronous actor-learner"),
    "deep-lag": ("vaco_jax.studies.deep_lag", "real actor-learner configurations that realise deep lag (a pilot)"),
    "locomotion-pilot": ("vaco_jax.studies.locomotion_pilot", "the locomotion study's pilot (run, report)"),
    "rebuild-docs": ("vaco_jax.studies.rebuild_docs", "rebuild the docs made from results/ (in the current directory)"),
}
