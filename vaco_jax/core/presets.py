"""The methods' registry, kept where the trainer's modules look for it: the entries live in
``vaco_jax.names`` (no jax, no numpy), which figures and tables read directly."""

from vaco_jax.names import CUSTOM, METHODS, PIECE_FIELDS, MethodPreset, label  # noqa: F401  (re-exported)
