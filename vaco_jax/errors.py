"""The package's one error type for bad settings, below every other module (the trainer, the engines
and the driver all raise it)."""


class ConfigError(ValueError):
    """A setting has a value outside its allowed set (raised before anything is compiled)."""
