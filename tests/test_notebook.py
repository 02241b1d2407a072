"""The exploration notebook runs end to end on a real (tiny) lag-sweep run directory."""

from __future__ import annotations

import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "notebooks", "explore.ipynb")

pytestmark = pytest.mark.slow


def _env(extra: dict | None = None) -> dict:
    """Environment for child processes: the test suite's persistent XLA cache, so compiled programs are shared."""
    cache = os.environ.get("VACO_JAX_TEST_CACHE", os.path.join(REPO, ".jax_cache"))
    env = dict(os.environ)
    env.update({"JAX_COMPILATION_CACHE_DIR": cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", **(extra or {})})
    return env


def _kernel_dir(tmp_path) -> str:
    """A 'python3' kernel spec that starts ipykernel from *this* interpreter (nothing registered globally)."""
    root = tmp_path / "jupyter"
    spec_dir = root / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test interpreter)", "language": "python"}))
    return str(root)


def test_notebook_is_valid_and_reads_its_run_from_the_environment():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code  # saved with its outputs (test_the_committed_notebook_holds_its_outputs)
    assert any(c.cell_type == "markdown" for c in nb.cells)
    first = code[0].source
    assert 'os.environ.get("VACO_JAX_RUN_DIR", "runs/lag_sweep_demo")' in first
    assert 'os.environ.get("VACO_JAX_NOTEBOOK_TINY") == "1"' in first


def test_notebook_runs_on_a_tiny_sweep(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.studies import lag_sweep

    run_dir = str(tmp_path / "run")
    # the sweep in this process (its command line is tested elsewhere): the notebook reads its run directory
    lag_sweep.main(parse_args(lag_sweep.Args, ["--preset", "tiny", "--out", run_dir, "--no-progress",
                                               "--bootstrap-reps", "200", "--episode-length", "50", "--no-figures"]))
    assert os.path.exists(os.path.join(run_dir, "summary.csv"))
    assert not os.path.exists(os.path.join(run_dir, "figures"))  # the notebook draws them (the sweep's are tested in test_plots)

    for k, v in _env({"VACO_JAX_RUN_DIR": run_dir, "VACO_JAX_NOTEBOOK_TINY": "1",
                      "JUPYTER_PATH": _kernel_dir(tmp_path)}).items():
        monkeypatch.setenv(k, v)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # run from notebooks/, as `jupyter notebook` runs it: the notebook resolves its paths against the repository root
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=600, startup_timeout=120,
                                     resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
    client.execute()  # raises CellExecutionError (with the traceback) if any cell fails

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream")
    assert "finished runs" in text and "figures" in text and "one episode of" in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the main sweep figure and the interactive learning curve
    figures = os.path.join(run_dir, "figures")
    assert os.path.exists(os.path.join(figures, "aggregate_vs_lag_final_eval_return_normalized.png")) \
        or os.path.exists(os.path.join(figures, "aggregate_vs_lag_final_eval_return_raw.png"))


def test_the_committed_notebook_holds_its_outputs():
    """The notebook is saved with what it printed and drew on a real run (a make-demo run directory),
    its video of a trained policy included, so a reader sees it without running anything."""
    with open(NOTEBOOK) as f:
        nb = json.load(f)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in code), [c["source"][:1] for c in code if not c["outputs"]]
    html = ["".join(o.get("data", {}).get("text/html", "")) for c in code for o in c["outputs"]]
    assert any("<video" in h and "base64" in h for h in html)
    images = [o for c in code for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert len(images) >= 2
    text = "".join("".join(o.get("text", "")) for c in code for o in c["outputs"] if o["output_type"] == "stream")
    assert "run directory: runs/lag_sweep_demo (found)" in text  # the make-demo run, found from the repository root
    assert "chunk/s" not in text and "\r" not in text  # the training cell runs with progress=False: no tqdm fragments
    assert "/tmp/" not in text and REPO not in text  # paths relative to the root: nothing of the machine that ran it
