"""``python -m vaco_jax COMMAND [flags]``: the package's commands without installed scripts.

    python -m vaco_jax train ...    one configuration (= vaco-train; --help lists every flag)
    python -m vaco_jax render ...   a video of a trained policy (= vaco-render)
"""

import sys

COMMANDS = {"train": "vaco_jax.driver.train", "render": "vaco_jax.driver.render"}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        given = repr(sys.argv[1]) if len(sys.argv) > 1 else "nothing"
        sys.stderr.write(f"error: command={given}; allowed values: {', '.join(COMMANDS)} "
                         "(python -m vaco_jax COMMAND --help)\n")
        sys.exit(2)
    import importlib

    command = sys.argv.pop(1)
    sys.argv[0] = f"python -m vaco_jax {command}"
    importlib.import_module(COMMANDS[command]).cli()


if __name__ == "__main__":
    main()
