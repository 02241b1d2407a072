"""The package's layout holds: imports only go downward (studies -> driver -> core -> envs -> errors; driver
and studies -> analysis; everything -> the jax-free registry of names, ``vaco_jax/names.py``), analysis
imports nothing from core, no module imports another that imports it back (function-level imports
included), nothing in the package imports ``benchmarks/``, no module is over 700 lines and docs/architecture.md
names every module."""

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "vaco_jax")

# what each part may import from the package (every import: at load time or inside a function)
ALLOWED = {
    "names": ("vaco_jax.names",),
    "errors": ("vaco_jax.errors",),
    "envs": ("vaco_jax.names", "vaco_jax.errors", "vaco_jax.envs"),
    "core": ("vaco_jax.names", "vaco_jax.errors", "vaco_jax.envs", "vaco_jax.core"),
    "analysis": ("vaco_jax.names", "vaco_jax.errors", "vaco_jax.analysis"),
    "driver": ("vaco_jax.names", "vaco_jax.errors", "vaco_jax.envs", "vaco_jax.core", "vaco_jax.analysis",
               "vaco_jax.driver"),
    "studies": ("vaco_jax.names", "vaco_jax.errors", "vaco_jax.envs", "vaco_jax.core", "vaco_jax.analysis",
                "vaco_jax.driver", "vaco_jax.studies"),
}


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                yield rel[: -len(".__init__")] if rel.endswith(".__init__") else rel, path


def _imports(path: str, top_level_only: bool = False, package: str = "vaco_jax.") -> list[tuple[int, str]]:
    tree = ast.parse(open(path).read())
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in out if name.startswith(package)]


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_imports_only_go_downward():
    wrong = []
    for module, path in _modules():
        part = _part(module)
        if part is None:  # vaco_jax/__init__.py and __main__.py: the public names and the commands
            continue
        for line, name in _imports(path):
            if not any(name == a or name.startswith(a + ".") for a in ALLOWED[part]):
                wrong.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def _import_graph(top_level_only: bool, modules: dict | None = None) -> dict:
    """{module: the package modules it imports} over ``modules`` ({name: path}; the package's by default)."""
    modules = dict(_modules()) if modules is None else modules
    graph = {}
    for module, path in modules.items():
        deps = set()
        for _, name in _imports(path, top_level_only=top_level_only):
            while name and name not in modules:  # `from pkg.mod import name` -> pkg.mod
                name = name.rpartition(".")[0]
            if name and name != module:
                deps.add(name)
        graph[module] = deps
    return graph


def _cycles(graph: dict) -> list[str]:
    """Every strongly connected group of two or more modules (Tarjan), each as one line."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(" <-> ".join(sorted(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_at_load_time():
    cycles = _cycles(_import_graph(top_level_only=True))
    assert not cycles, "\n".join(cycles)


def test_no_import_cycle_at_all():
    """Function-level imports included: an import moved into a function to break a cycle at load time
    still ties the two modules together, so the helper they share belongs below both."""
    cycles = _cycles(_import_graph(top_level_only=False))
    assert not cycles, "\n".join(cycles)


def test_analysis_imports_nothing_from_core():
    """Figures and tables know methods and knobs from the jax-free registry (``vaco_jax.names``)."""
    wrong = [f"{os.path.relpath(path, ROOT)}:{line} imports {name}" for module, path in _modules()
             if _part(module) == "analysis" for line, name in _imports(path) if name.startswith("vaco_jax.core")]
    assert not wrong, "\n".join(wrong)


def test_nothing_in_the_package_imports_benchmarks():
    wrong = [f"{os.path.relpath(path, ROOT)}:{line} imports {name}" for _, path in _modules()
             for line, name in _imports(path, package="benchmarks")]
    assert not wrong, "\n".join(wrong)


def test_the_registry_of_names_imports_no_jax_and_no_numpy():
    code = ("import sys, vaco_jax.names, vaco_jax.core.presets; "
            "print(sorted(m for m in ('jax', 'jaxlib', 'flax', 'optax', 'numpy', 'brax', 'mujoco') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_package_command_names_its_commands():
    out = subprocess.run([sys.executable, "-m", "vaco_jax", "trian"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: command='trian'; allowed values: train, render, lag-sweep, plot, "
                                  "locomotion, steplag, bench, study, claims, screen, forward-lag, delta-sweep, mismatch, "
                                  "sim-vs-real, deep-lag, locomotion-pilot, rebuild-docs (python -m vaco_jax COMMAND --help)")
    listing = subprocess.run([sys.executable, "-m", "vaco_jax", "--help"], capture_output=True, text=True,
                             timeout=60, cwd=ROOT)
    assert listing.returncode == 0 and "lag-sweep" in listing.stdout and "the main job" in listing.stdout


def test_every_command_is_an_installed_script_and_an_experiments_file():
    """pyproject's scripts, ``python -m vaco_jax``'s commands and experiments/'s files name the same
    things; each experiments/ file only runs its study (no sys.path edits: the package is installed)."""
    import importlib
    import tomllib

    from vaco_jax.__main__ import COMMANDS
    from vaco_jax.studies import COMMANDS as STUDIES

    scripts = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["scripts"]
    expected = {f"vaco-{name}": f"{module}:cli" for name, (module, _) in COMMANDS.items() if name != "rebuild-docs"}
    assert scripts == expected
    for target in scripts.values():
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr)), target
    files = {f[:-3] for f in os.listdir(os.path.join(ROOT, "experiments"))
             if f.endswith(".py") and not f.startswith("single_file_")  # (those are whole experiments to read,
             and f != "own_study.py"}  # as is this whole study on the kit, tests/test_own_study.py)
    assert files == {module.rsplit(".", 1)[1] for module, _ in STUDIES.values()}
    for name in files:
        text = open(os.path.join(ROOT, "experiments", f"{name}.py")).read()
        assert "sys.path" not in text and f"from vaco_jax.studies.{name} import cli" in text, name
        assert len(text.splitlines()) <= 15, name


def test_the_public_names_resolve():
    import vaco_jax

    for name in vaco_jax.__all__:
        assert getattr(vaco_jax, name) is not None, name


MAX_LINES = 700  # a module that needs more is two (docs/architecture.md)


def test_no_module_is_longer_than_the_limit():
    long = {name: n for name, path in _modules() if (n := sum(1 for _ in open(path))) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split by what each part computes): {long}"


STUDY_MAX_LINES = 300  # a study module is a declaration of its units and rules on the kit
KIT_MAX_LINES = 700  # the kit itself (``studies/kit.py``), which every protocol study shares
# The study modules still over STUDY_MAX_LINES. The list only shrinks: a module added to the package must
# fit the limit (split by what each part computes, what is generic moved to the kit), and a module on the
# list that is brought under the limit, renamed or removed must leave the list (the test says which).
STUDY_MODULES_STILL_OVER = ()


def test_every_study_module_is_at_most_300_lines_and_the_kit_700():
    lines = {name.rsplit(".", 1)[1]: sum(1 for _ in open(path)) for name, path in _modules()
             if name.startswith("vaco_jax.studies.")}
    over = {m: n for m, n in lines.items() if n > (KIT_MAX_LINES if m == "kit" else STUDY_MAX_LINES)}
    new = {m: n for m, n in over.items() if m not in STUDY_MODULES_STILL_OVER}
    assert not new, (f"study modules over {STUDY_MAX_LINES} lines (the kit: {KIT_MAX_LINES}): {new}; split each by what "
                     "its parts compute and move what is generic to the kit (docs/studies.md)")
    left = [m for m in STUDY_MODULES_STILL_OVER if m not in over]
    assert not left, (f"{left} no longer over {STUDY_MAX_LINES} lines (or gone): remove them from "
                      "STUDY_MODULES_STILL_OVER in tests/test_layout.py, so that the list only shrinks")


def test_the_architecture_page_names_every_module():
    """docs/architecture.md is where a newcomer finds a module: a new one is listed there, by file or module name."""
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        page = f.read()
    missing = [name for name, path in _modules()
               if not path.endswith(("__init__.py", "__main__.py"))
               and f"`{name.rsplit('.', 1)[-1]}.py`" not in page and f"`{name.rsplit('.', 1)[-1]}`" not in page]
    assert not missing, f"not in docs/architecture.md: {missing}"


def _private_names_taken(path: str, module: str, modules: set) -> list[str]:
    """``other._name`` where ``other`` names a module of the package (by any import of it), and
    ``from vaco_jax.<other> import _name``, in one module's source: a private name taken across modules."""
    tree = ast.parse(open(path).read())
    aliases = {}  # a name bound in this module -> the package module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("vaco_jax"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("vaco_jax"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in modules:
                    aliases[a.asname or a.name] = full
    wrong = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in modules and node.module != module:
            wrong += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")
                      and f"{node.module}.{a.name}" not in modules]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            parts, value = [], node.value
            while isinstance(value, ast.Attribute):
                parts.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                owner = ".".join([aliases[value.id]] + parts)
                if owner in modules and owner != module:
                    wrong.append(f"{node.lineno}: {owner}.{node.attr}")
    return sorted(wrong, key=lambda w: (int(w.split(":")[0]), w))


def test_no_study_module_takes_a_private_name_of_another_module():
    """A study uses another module's public names only (a name it shares belongs in the kit, public)."""
    modules = dict(_modules())
    wrong = [f"{os.path.relpath(path, ROOT)}:{line}" for module, path in sorted(modules.items())
             if module.startswith("vaco_jax.studies.")
             for line in _private_names_taken(path, module, set(modules))]
    assert not wrong, "\n".join(wrong)


def test_the_private_name_check_sees_each_way_of_taking_one(tmp_path):
    source = ("import vaco_jax.studies.kit as k\nfrom vaco_jax.studies import sim_vs_real as svr\n"
              "import vaco_jax.analysis.results\nfrom vaco_jax.studies.kit import _x, load_protocol\n"
              "def f():\n    return k._a, svr._b(), vaco_jax.analysis.results._c, svr.public, k.__name__, _own\n")
    path = tmp_path / "m.py"
    path.write_text(source)
    modules = {"vaco_jax.studies.kit", "vaco_jax.studies.sim_vs_real", "vaco_jax.analysis.results",
               "vaco_jax.studies.m"}
    assert _private_names_taken(str(path), "vaco_jax.studies.m", modules) == [
        "4: from vaco_jax.studies.kit import _x", "6: vaco_jax.analysis.results._c", "6: vaco_jax.studies.kit._a",
        "6: vaco_jax.studies.sim_vs_real._b"]


def test_the_real_versus_simulated_studies_share_the_kit_not_each_other():
    graph = _import_graph(top_level_only=False)
    for study in ("sim_vs_real", "deep_lag", "deep_lag_report"):
        deps = graph[f"vaco_jax.studies.{study}"]
        assert "vaco_jax.studies.kit_real" in deps, study
        assert not deps & {"vaco_jax.studies.sim_vs_real", "vaco_jax.studies.deep_lag"} - {f"vaco_jax.studies.{study}"}


STUDY_CHAIN_MAX = 2  # the longest chain of imports among study modules (a study, its parts, the kits)


def _longest_chain(graph: dict, prefix: str = "vaco_jax.studies") -> list[str]:
    """The longest chain of imports among the modules named ``prefix`` or under it (every import: at load
    time or inside a function), as its modules in order; a graph with a circle is the cycle tests' case."""
    inside = {m: sorted(d for d in deps if d == prefix or d.startswith(prefix + "."))
              for m, deps in graph.items() if m == prefix or m.startswith(prefix + ".")}
    memo: dict = {}

    def chain(m: str, seen: tuple) -> list[str]:
        if m not in memo:
            tails = [chain(d, seen + (m,)) for d in inside.get(m, ()) if d not in seen]
            memo[m] = [m] + max(tails, key=len, default=[])
        return memo[m]

    return max((chain(m, ()) for m in sorted(inside)), key=len, default=[])


def test_the_longest_chain_of_imports_among_study_modules_is_at_most_2():
    """A study imports its parts and the kits, and they import no study: a chain of more than two imports
    (a study -> a part -> another study's part) ties a study to another's insides, which belong in a kit."""
    chain = _longest_chain(_import_graph(top_level_only=False))
    assert len(chain) - 1 <= STUDY_CHAIN_MAX, (
        f"a chain of {len(chain) - 1} imports among study modules (at most {STUDY_CHAIN_MAX}): "
        + " -> ".join(m.rsplit(".", 1)[1] for m in chain) + "; move what the last ones share down into a kit")


def test_the_chain_check_counts_every_kind_of_import(tmp_path):
    modules = {}
    for name, source in (("a", "from vaco_jax.studies import b\nimport vaco_jax.studies.d\n"),
                         ("b", "def f():\n    from vaco_jax.studies.c import g\n"),
                         ("c", "import vaco_jax.studies.d\n"), ("d", "import vaco_jax.core.config\n")):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        modules[f"vaco_jax.studies.{name}"] = str(path)
    assert _longest_chain(_import_graph(False, modules)) == [
        "vaco_jax.studies.a", "vaco_jax.studies.b", "vaco_jax.studies.c", "vaco_jax.studies.d"]
    assert _longest_chain(_import_graph(True, modules)) == ["vaco_jax.studies.a", "vaco_jax.studies.b"]
