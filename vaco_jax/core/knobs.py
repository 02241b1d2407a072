"""A knob's value checked against its entry in the registry (``vaco_jax.names.KNOBS``: every numeric
knob once, with its home, allowed range and help line, read from its one declaration in
``names.Settings``).

``Config`` holds a default for each knob (a method knob's default None means "the piece's own
default"); ``config.make_traced`` builds one cell's traced values from the config plus overrides.
Everything else in ``Config`` is static: it sets shapes or code paths, and a new value recompiles.
"""

from __future__ import annotations

import math

import numpy as np

from vaco_jax.errors import ConfigError  # noqa: F401  (re-exported: the knobs' checks raise it)
from vaco_jax.names import COMMON_KNOBS, KNOBS, LAG_KNOBS, METHOD_KNOBS, Knob  # noqa: F401  (re-exported)

# The training dtype's range: a knob enters the program as float32 (``config.make_traced``), so a value
# Python holds but float32 does not (it rounds to inf, to 0, or to a subnormal that has lost its
# precision) is refused here, by one rule for every float, before anything is compiled.
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32, ~1.18e-38


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def float32_problem(name: str, value) -> str | None:
    """Why the finite number ``value`` cannot be ``name`` in float32 (the training dtype), or None: its
    magnitude above float32's largest (it would be inf) or, non-zero, below its smallest normal number
    (it would be 0, or a subnormal without the precision the arithmetic needs)."""
    v = float(value)
    if not math.isfinite(v) or v == 0:
        return None
    if abs(v) > FLOAT32_MAX:
        return (f"{name}={value!r} overflows float32, the training dtype (largest finite value "
                f"{FLOAT32_MAX:.6g})")
    if abs(v) < FLOAT32_TINY:
        becomes = "rounds to 0" if float(np.float32(v)) == 0 else "is a subnormal number"
        return (f"{name}={value!r} {becomes} in float32, the training dtype; the smallest allowed magnitude is "
                f"{FLOAT32_TINY:.6g} (float32's smallest normal number)")
    return None


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
        for i, weight in enumerate(value):
            problem = float32_problem(f"age_weights[{i}]", weight)
            if problem:
                raise ConfigError(problem)
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
        problem = float32_problem(name, value)
        if problem:
            raise ConfigError(problem)
        return
    if knob.integer and not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}={value!r} must be an integer ({knob.allowed()})")
    v = float(value)
    bad = (math.isnan(v) or (math.isinf(v) and not (knob.allow_inf and v > 0)) or v < knob.low
           or (knob.low_open and v == knob.low) or v > knob.high)
    if bad:
        raise ConfigError(f"{name}={value!r} is not allowed; {name} must be {knob.allowed()}")
    problem = float32_problem(name, value)  # inside the range, but not a float32
    if problem:
        raise ConfigError(problem + (f"; allowed values: {knob.allowed()}" if abs(v) > FLOAT32_MAX else ""))
