"""``python -m vaco_jax COMMAND [flags]``: every command of the package without installed scripts.

    python -m vaco_jax train ...       one configuration (= vaco-train; --help lists every flag)
    python -m vaco_jax render ...      a video of a trained policy (= vaco-render)
    python -m vaco_jax lag-sweep ...   a study (= vaco-lag-sweep = python experiments/lag_sweep.py);
                                       python -m vaco_jax lists them all
"""

import sys

from vaco_jax.studies import COMMANDS as STUDIES

COMMANDS = {"train": ("vaco_jax.driver.train", "one configuration: train, evaluate, write a run directory"),
            "render": ("vaco_jax.driver.render_cli", "a video (or HTML page) of a trained policy acting"),
            **STUDIES}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "usage: python -m vaco_jax COMMAND [--help | flags]\n\ncommands:\n" + "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) < 2:
        sys.stderr.write(_usage())
        sys.exit(2)
    if sys.argv[1] in ("-h", "--help"):
        sys.stdout.write(_usage())
        sys.exit(0)
    if sys.argv[1] not in COMMANDS:
        sys.stderr.write(f"error: command={sys.argv[1]!r}; allowed values: {', '.join(COMMANDS)} "
                         "(python -m vaco_jax COMMAND --help)\n")
        sys.exit(2)
    import importlib

    command = sys.argv.pop(1)
    sys.argv[0] = f"python -m vaco_jax {command}"
    importlib.import_module(COMMANDS[command][0]).cli()


if __name__ == "__main__":
    main()
