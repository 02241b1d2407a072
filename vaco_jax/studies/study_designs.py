"""The pendulum-suite study's designs (``vaco_jax.studies.study``): one run directory each, saying which
methods a claim compares, at which lag depths, with which settings, and whether it runs on every task
or only on the study's pair tasks (the two cheapest)."""

from __future__ import annotations

import dataclasses

MISMATCH_STRENGTH = 0.5  # docs/lag.md: 14% of samples' π_old/π_infer leave [0.5, 2] at m = 0.5
# At m = 0.5 the revised PPO-EWMA's reset (kept fraction < 0.5) never fired on either task, so claim 4b
# could not be tested there. At m = 1.5 the mismatch alone keeps ~51% of one action dimension's samples
# (docs/lag.md), so the reset fires when staleness pushes the kept fraction further down.
MISMATCH_STRENGTH_STRONG = 1.5


@dataclasses.dataclass(frozen=True)
class Design:
    """One run directory of the study: the methods a claim compares, at which lag depths, on which tasks.

    ``variants``: method -> ((name, static changes, step-knob factor), ...): extra groups of a method
    run beside (or instead of, when the method is not in ``methods``) its tuned form, in a subdirectory
    ``variant=<name>`` with a ``variant`` column. ``traced``: method -> {knob: values} multiplying its
    cells. ``static`` / ``knobs``: settings of every group (a static field / a traced knob's value).
    """

    claims: str
    methods: tuple
    lag_depths: tuple
    every_task: bool = False
    static: tuple = ()
    knobs: tuple = ()
    traced: tuple = ()
    variants: tuple = ()


MISMATCH = Design("4", ("ppo_ewma", "ppo_ewma_revised"), (16,),
                  knobs=(("mismatch_strength", MISMATCH_STRENGTH),),
                  static=(("ppo_ewma", (("old_logit_source", "infer"),)),),
                  traced=(("ppo_ewma_revised", (("ewma_reset_threshold", (0.0, 0.5)),)),))

DESIGNS = {
    # 1: lag costs PPO-Clip / PPO-KL / SPO and not VACO; 2: filter / clip fractions; 6: own-B1 normalisation
    "lag": Design("1 2 6", ("ppo_clip", "ppo_kl", "spo", "vaco"), (1, 4, 16), every_task=True),
    # 3: A-3PO vs decoupled PPO with pi_T recomputed
    "proximal": Design("3", ("a3po", "decoupled_recompute"), (1, 16)),
    # 4: revised vs plain PPO-EWMA under a training-inference mismatch; the revised one without its reset.
    # Plain PPO-EWMA takes pi_old from the actor's reported log-probs (old logits missing, as in a
    # system whose inference engine is not the learner); the revised one imposes its own.
    "mismatch": MISMATCH,
    # 4 again, at a mismatch large enough for the reset to fire (a directory of its own: a finished design
    # is never changed)
    "mismatch_strong": dataclasses.replace(MISMATCH, knobs=(("mismatch_strength", MISMATCH_STRENGTH_STRONG),)),
    # 5: each half of VACO alone (full VACO's runs are the lag design's)
    "ablation": Design("5", ("vaco_realign_only", "vaco_filter_only"), (16,)),
    # 6: is VACO's edge only a larger step? PPO-Clip with twice its tuned clip range, and with twice the epochs
    "step": Design("6", (), (1, 16), variants=(("ppo_clip", (("clip_x2", (), 2.0), ("epochs_x2", (("num_epochs", 8),),
                                                                                                1.0))),)),
}
