"""A knob's value checked against its entry in the registry (``vaco_jax.names.KNOBS``: every numeric
knob once, with its home, allowed range and help line).

``Config`` holds a default for each knob (a method knob's default None means "the piece's own
default"); ``config.make_traced`` builds one cell's traced values from the config plus overrides.
Everything else in ``Config`` is static: it sets shapes or code paths, and a new value recompiles.
"""

from __future__ import annotations

import math

import numpy as np

from vaco_jax.errors import ConfigError  # noqa: F401  (re-exported: the knobs' checks raise it)
from vaco_jax.names import COMMON_KNOBS, KNOBS, LAG_KNOBS, METHOD_KNOBS, Knob  # noqa: F401  (re-exported)

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_knob(name: str, value) -> None:
    """Raise ConfigError naming the knob and its allowed values unless ``value`` is allowed.

    Concrete values only (Python or numpy scalars, tuples for ``age_weights``, concrete arrays);
    knobs a user's own piece adds (not in KNOBS) are accepted when they are finite numbers.
    """
    knob = KNOBS.get(name)
    if name == "age_weights":
        if not isinstance(value, (tuple, list)) or len(value) == 0 or not all(_is_number(w) for w in value):
            raise ConfigError(f"age_weights={value!r} must be a non-empty sequence of numbers")
        w = np.asarray(value, float)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ConfigError(f"age_weights={value!r} must be finite, >= 0, and not all 0")
        return
    arr = np.asarray(value) if not _is_number(value) and hasattr(value, "shape") else None
    if arr is not None:  # a concrete array (stacked cells): check every entry
        for v in arr.reshape(-1).tolist():
            check_knob(name, v)
        return
    if not _is_number(value):
        raise ConfigError(f"{name}={value!r} must be a number" + (f" ({knob.allowed()})" if knob else ""))
    if knob is None:
        if math.isnan(float(value)):
            raise ConfigError(f"{name}={value!r} must not be NaN")
        return
    if knob.integer and not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}={value!r} must be an integer ({knob.allowed()})")
    v = float(value)
    bad = (math.isnan(v) or (math.isinf(v) and not (knob.allow_inf and v > 0)) or v < knob.low
           or (knob.low_open and v == knob.low) or v > knob.high
           or (math.isfinite(v) and abs(v) > FLOAT32_MAX))
    if bad:
        raise ConfigError(f"{name}={value!r} is not allowed; {name} must be {knob.allowed()}")
