#!/usr/bin/env bash
# One-shot check of the project on a GPU machine without network access, in under 8 minutes.
#
#   bash benchmarks/gpu_check.sh [WHEELS_DIR]          # from the repository root; default WHEELS_DIR: wheels
#
# Steps, in this order, each under `timeout` with the seconds left of one global deadline (a step
# that no longer fits is skipped with a line saying so; a failing step never stops the next one):
#   setup       install, from WHEELS_DIR and offline, the distributions this Python lacks (--no-deps,
#               so the machine's CUDA jax stays), then the project (pip install --no-deps -e .);
#               print nvidia-smi, the versions of python/jax/jaxlib/flax/brax/mujoco/mujoco-mjx and
#               jax.devices(); write versions.json
#   throughput  python -m benchmarks.throughput on inverted_double_pendulum (2048 envs x 32 steps) and on
#               halfcheetah (2048 envs x 64 steps): raw env and our trainer (Brax's trainer: GPU_CHECK_BRAX=1)
#   slice       a slice of the lag sweep's `paper` preset (halfcheetah, ppo_clip and vaco, 6 lag
#               depths x 10 seeds), env steps per cell and --max-chunks sized from the measured
#               halfcheetah steps/s (the arithmetic is printed), at most ~60M env steps in all
#   tests       on the real devices: a tiny grid sharded over all local devices vs on one device,
#               and stopped after one chunk and resumed; then the sharding/resume tests as written
#               (forced host devices on the CPU): tests/test_integrity.py -k device_count and
#               tests/test_sweep.py -k interrupted
# Everything goes to $OUT if set, else runs/gpu_check/: gpu_check.log (every line printed, so every
# number), versions.json, summary.json (exit code and seconds of every step, the slice's sizing),
# the throughput JSONs and the slice's tables (its checkpoints stay in GPU_CHECK_SLICE_DIR).
#
# Environment (all optional):
#   PYTHON                 interpreter with the machine's CUDA jax (default python3)
#   GPU_CHECK_BUDGET_S     global deadline in seconds from the start (default 450: the last step is
#                          killed by then, the script ends < 8 min even with `timeout`'s grace period)
#   GPU_CHECK_VENV         venv created with --system-site-packages to install into (default
#                          .gpu_venv; "none": install into PYTHON's own environment)
#   GPU_CHECK_TEST_RESERVE_S  seconds kept for the tests when the slice is sized (default 120)
#   GPU_CHECK_BRAX=1       also time Brax's own PPO trainer on inverted_double_pendulum (its compile
#                          costs about a minute of the budget on CPU; off by default)
#   GPU_CHECK_SLICE_DIR    run directory of the slice (default runs/gpu_check_slice; rerunning the
#                          script continues it from its checkpoints, at the env steps per cell its
#                          first run sized, kept in gpu_check_slice_steps.env there)
#   GPU_CHECK_SLICE_CAP    cap on the slice's env steps in all (default 60000000)
#   GPU_CHECK_STEPS        steps to run (default "setup throughput slice tests")
#   GPU_CHECK_DRY=1        a CPU dry run of the control flow: no nvidia-smi, no install, the tiny
#                          point_mass task everywhere and the `tiny` preset, pytest --collect-only
set -u -o pipefail

T0=$(date +%s)
CALLER=$(pwd)
WHEELS_DIR=${1:-${WHEELS_DIR:-wheels}}
OUT_DIR=${OUT:-runs/gpu_check}
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
# paths given relative to where the script was started from
case $WHEELS_DIR in /*) ;; *) [ -e "$CALLER/$WHEELS_DIR" ] && WHEELS_DIR=$CALLER/$WHEELS_DIR ;; esac
case $OUT_DIR in /*) ;; *) [ -n "${OUT:-}" ] && OUT_DIR=$CALLER/$OUT_DIR ;; esac
DRY=${GPU_CHECK_DRY:-0}
BUDGET=${GPU_CHECK_BUDGET_S:-450}
DEADLINE=$((T0 + BUDGET))
PY=${PYTHON:-python3}
VENV=${GPU_CHECK_VENV:-.gpu_venv}
TEST_RESERVE=${GPU_CHECK_TEST_RESERVE_S:-120}
SLICE_DIR=${GPU_CHECK_SLICE_DIR:-runs/gpu_check_slice}
STEPS=${GPU_CHECK_STEPS:-"setup throughput slice tests"}
case $VENV in none | /*) ;; *) VENV=$REPO/$VENV ;; esac
GRACE=5  # seconds between timeout's TERM and KILL

mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG=$OUT_DIR/gpu_check.log
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # the project imports even if its install fails
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$REPO/.jax_cache}
export MPLBACKEND=Agg

if [ "$DRY" = 1 ]; then
  LOCO=point_mass; IDP=point_mass; PRESET=tiny
  IDP_CAP=100
  LAGS="1 4"; SEEDS="0 1"; SLICE_CAP=${GPU_CHECK_SLICE_CAP:-8192}
  TP_IDP=(--num-envs 64 --phases 2 --cost-cycles 1 --repeats 2 --skip-brax --no-raw-brax)
  TP_LOCO=(--num-envs 64 --unroll-length 16 --phases 2 --repeats 2 --skip-brax --no-raw-brax --compare-lag-depths --no-synchronous)
else
  LOCO=halfcheetah; IDP=inverted_double_pendulum; PRESET=paper
  LAGS="1 2 4 8 16 32"; SEEDS="0 1 2 3 4 5 6 7 8 9"; SLICE_CAP=${GPU_CHECK_SLICE_CAP:-60000000}
  TP_IDP=(--num-envs 2048 --phases 10 --cost-cycles 5 --repeats 3 --no-raw-brax)
  IDP_CAP=90
  if [ "${GPU_CHECK_BRAX:-0}" = 1 ]; then IDP_CAP=160; else TP_IDP+=(--skip-brax); fi
  TP_LOCO=(--num-envs 2048 --unroll-length 64 --phases 4 --repeats 3 --skip-brax --no-raw-brax --compare-lag-depths --no-synchronous)
fi
METHODS="ppo_clip vaco"

declare -A RC SECS
ORDER=()
left() { echo $((DEADLINE - $(date +%s))); }
elapsed() { echo $(($(date +%s) - T0)); }

# run_step NAME MIN_S CAP_S CMD...: run CMD under timeout min(seconds left - GRACE, CAP_S) (CAP_S 0 = no
# cap); skipped when fewer than MIN_S seconds are left. Records exit code (124 = hit its timeout).
run_step() {
  local name=$1 need=$2 cap=$3
  shift 3
  ORDER+=("$name")
  local l
  l=$(left)
  if [ "$l" -lt "$need" ]; then
    echo "=== [$name] SKIPPED: $l s left before the global deadline (${BUDGET} s), this step needs >= $need s"
    RC[$name]=skipped
    SECS[$name]=0
    return 0
  fi
  local t=$((l - GRACE))
  if [ "$cap" -gt 0 ] && [ "$cap" -lt "$t" ]; then t=$cap; fi
  echo "=== [$name] start at +$(elapsed) s, timeout $t s ($l s left): $*"
  local s rc
  s=$(date +%s)
  if declare -F "$1" > /dev/null; then  # a function of this script: run it in a child bash (exported)
    timeout --kill-after=$GRACE "$t" bash -c 'set -u -o pipefail; "$@"' step "$@"
  else
    timeout --kill-after=$GRACE "$t" "$@"
  fi
  rc=$?
  RC[$name]=$rc
  SECS[$name]=$(($(date +%s) - s))
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "=== [$name] TIMED OUT after ${SECS[$name]} s (exit $rc)"
  else
    echo "=== [$name] exit $rc after ${SECS[$name]} s"
  fi
  return 0
}

want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), repo $REPO, commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "gpu_check: budget $BUDGET s (deadline $(date -u -d @$DEADLINE +%H:%M:%S 2>/dev/null || echo $DEADLINE) UTC), dry=$DRY, wheels=$WHEELS_DIR, out=$OUT_DIR, steps: $STEPS"

# ----------------------------------------------------------------------------- (a) setup

# The distributions the project needs at run time (and pytest for the tests), by distribution name.
NEEDED="brax mujoco mujoco-mjx tyro docstring-parser typeguard flask flask-cors blinker click itsdangerous
jinja2 markupsafe werkzeug jaxopt ml-collections trimesh glfw pyopengl websockets pillow tensorboardx packaging
matplotlib contourpy cycler fonttools kiwisolver pyparsing python-dateutil pandas tzdata tqdm fsspec zipp
pytest iniconfig pluggy"

missing_dists() {  # prints the names in NEEDED that $PY cannot find
  "$PY" - $NEEDED <<'EOF'
import importlib.metadata as md, sys
missing = []
for name in sys.argv[1:]:
    try:
        md.version(name)
    except md.PackageNotFoundError:
        missing.append(name)
print(" ".join(missing))
EOF
}

setup_install() {
  if [ "$DRY" = 1 ]; then
    echo "[setup] dry run: nothing is installed; missing from $PY: $(missing_dists || true)"
    return 0
  fi
  local status=0
  if [ "$VENV" != none ]; then
    local created=0
    if [ ! -x "$VENV/bin/python" ]; then
      echo "[setup] $PY -m venv --system-site-packages $VENV (keeps the machine's jax and CUDA)"
      created=1
      "$PY" -m venv --system-site-packages "$VENV" || echo "[setup] venv creation FAILED"
    fi
    local why=""
    if ! "$VENV/bin/python" -m pip --version > /dev/null 2>&1; then
      why="it has no working pip (python3-venv/ensurepip missing?)"
    elif [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("jax"))' 2>/dev/null)" != \
           "$("$PY" -c 'import importlib.metadata as m; print(m.version("jax"))' 2>/dev/null)" ]; then
      why="it does not see $PY's jax (is $PY itself in a venv?)"
    fi
    if [ -n "$why" ]; then
      echo "[setup] not using $VENV: $why; installing into $PY's own environment"
      [ "$created" = 1 ] && rm -rf "$VENV"
      VENV=none
    else
      PY="$VENV/bin/python"
    fi
  fi
  echo "$PY" > "$OUT_DIR/python_path"
  export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
  local missing
  missing=$(missing_dists) || { echo "[setup] could not list installed distributions"; status=1; }
  echo "[setup] missing from $PY: ${missing:-nothing}"
  if [ -n "${missing// /}" ]; then
    if [ ! -d "$WHEELS_DIR" ]; then
      echo "[setup] FAILED: wheels folder $WHEELS_DIR not found (make it with benchmarks/fetch_wheels.sh)"
      status=1
    else
      local pins=() n v
      for n in $missing; do  # exact versions from requirements.lock when it has them
        v=$(awk -F'==' -v k="$n" '{m=tolower($1); gsub("_","-",m); if (m==k) print $2}' requirements.lock)
        pins+=("$n${v:+==$v}")
      done
      echo "[setup] pip install --no-index --find-links $WHEELS_DIR --no-deps ${pins[*]}"
      if ! "$PY" -m pip install --no-compile --no-index --find-links "$WHEELS_DIR" --no-deps "${pins[@]}"; then
        echo "[setup] the joint install FAILED; one at a time:"
        for n in "${pins[@]}"; do
          "$PY" -m pip install -q --no-index --find-links "$WHEELS_DIR" --no-deps "$n" > /dev/null 2>&1 \
            && echo "[setup]   $n installed" || { echo "[setup]   $n FAILED"; status=1; }
        done
      fi
    fi
  fi
  echo "[setup] pip install --no-deps -e . (build backend from $WHEELS_DIR)"
  if ! "$PY" -m pip install --no-index --find-links "$WHEELS_DIR" --no-deps -e .; then
    echo "[setup] the isolated build FAILED; again with the machine's own setuptools (--no-build-isolation)"
    "$PY" -m pip install --no-index --find-links "$WHEELS_DIR" --no-deps --no-build-isolation -e . \
      || { echo "[setup] editable install FAILED: the project is imported through PYTHONPATH=$REPO"; status=1; }
  fi
  echo "[setup] pip check (dependency conflicts with this machine's packages are expected, e.g. the jax pin):"
  "$PY" -m pip check || true
  return $status
}

print_versions() {
  if [ "$DRY" = 1 ]; then
    echo "[versions] dry run: nvidia-smi skipped"
  else
    echo "[versions] nvidia-smi:"
    nvidia-smi || echo "[versions] nvidia-smi FAILED"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  fi
  "$PY" - "$OUT_DIR/versions.json" "$DRY" <<'EOF'
import importlib.metadata as md, json, os, platform, subprocess, sys
out = {"python": platform.python_version(), "python_executable": sys.executable, "dry_run": sys.argv[2] == "1"}
for name in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda13-pjrt",
             "flax", "optax", "chex", "orbax-checkpoint", "brax", "mujoco", "mujoco-mjx", "numpy", "scipy",
             "tyro", "pandas", "matplotlib", "pytest", "vaco_jax"):
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
try:
    out["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                        "--format=csv,noheader"], capture_output=True, text=True,
                                       timeout=30).stdout.strip().splitlines()
except Exception as e:  # no nvidia-smi (the dry run on a CPU machine)
    out["nvidia_smi"] = f"unavailable: {type(e).__name__}"
try:
    import jax
    out["jax_imported"] = jax.__version__
    out["default_backend"] = jax.default_backend()
    out["devices"] = [str(d) for d in jax.devices()]
    out["device_kind"] = jax.devices()[0].device_kind
    out["device_count"] = jax.device_count()
except Exception as e:
    out["jax_error"] = f"{type(e).__name__}: {e}"
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
for k, v in out.items():
    print(f"[versions] {k}: {v}")
EOF
}

# Steps that are functions of this script run in a child bash: export what they read.
export REPO DRY OUT_DIR PY VENV WHEELS_DIR NEEDED PRESET LOCO METHODS LAGS SEEDS TEST_RESERVE SLICE_CAP DEADLINE
export -f left missing_dists setup_install print_versions

rm -f "$OUT_DIR/python_path"
if want setup; then
  run_step setup 30 120 setup_install
  if [ -s "$OUT_DIR/python_path" ]; then PY=$(cat "$OUT_DIR/python_path"); fi
  export PY
  run_step versions 15 60 print_versions
else
  echo "=== [setup] not requested (GPU_CHECK_STEPS)"
  if [ "$VENV" != none ] && [ "$DRY" != 1 ] && "$VENV/bin/python" -m pip --version > /dev/null 2>&1; then
    PY="$VENV/bin/python"
  fi
  export PY
fi
echo "gpu_check: python for the remaining steps: $PY"

# ----------------------------------------------------------------------------- (b) throughput

if want throughput; then
  run_step "throughput_$IDP" 60 "$IDP_CAP" "$PY" -m benchmarks.throughput --env "$IDP" "${TP_IDP[@]}" \
    --out "$OUT_DIR/throughput_$IDP.json"
  tp_name="throughput_$LOCO"
  [ "$LOCO" = "$IDP" ] && tp_name="throughput_${LOCO}_2"
  run_step "$tp_name" 60 110 "$PY" -m benchmarks.throughput --env "$LOCO" "${TP_LOCO[@]}" \
    --out "$OUT_DIR/$tp_name.json"
  LOCO_JSON="$OUT_DIR/$tp_name.json"
else
  echo "=== [throughput] not requested (GPU_CHECK_STEPS)"
  LOCO_JSON="$OUT_DIR/throughput_$LOCO.json"
fi

# ----------------------------------------------------------------------------- (c) slice of the paper preset

size_slice() {  # prints the arithmetic; writes SLICE_STEPS and SLICE_CHUNKS to $OUT_DIR/slice_plan.env
  "$PY" - "$LOCO_JSON" "$PRESET" "$LOCO" "$METHODS" "$LAGS" "$SEEDS" "$(left)" "$TEST_RESERVE" "$SLICE_CAP" \
    "$OUT_DIR/slice_plan.env" <<'EOF'
import json, math, os, sys
sys.path.insert(0, os.getcwd())
from vaco_jax.studies.lag_sweep import PRESETS
tp_json, preset, task, methods, lags, seeds, left, reserve, cap, plan = sys.argv[1:]
p = PRESETS[preset]
n_groups = len(methods.split())
cells_per_group = len(lags.split()) * len(seeds.split())
cells = n_groups * cells_per_group
phase = p["num_envs"] * p["unroll_length"]          # env steps per cell per phase
evals = p["num_evals"]                              # chunks per run
left, reserve, cap = int(left), int(reserve), float(cap)
SAFETY = 0.5   # measured single-run rate -> assumed grid rate (evaluation, checkpoints, host work not timed)
STARTUP = 20   # s, guess: interpreter + jax start, run.json, the random-policy score of the task
print(f"[slice] preset {preset!r}: {p['num_envs']} envs x {p['unroll_length']} steps = {phase:,} env steps per "
      f"phase per cell, num_evals = {evals} chunks per run")
print(f"[slice] {task}, methods {methods} ({n_groups} groups = compiled programs), {len(lags.split())} lag depths x "
      f"{len(seeds.split())} seeds = {cells_per_group} cells per group, {cells} cells in all")
per_cell_cap = cap / cells
k_cap = max(1, int(per_cell_cap // (evals * phase)))  # phases per chunk the cap allows
print(f"[slice] cap {cap:,.0f} env steps / {cells} cells = {per_cell_cap:,.0f} per cell; total_env_steps is a "
      f"multiple of num_evals x phase = {evals} x {phase:,} = {evals * phase:,} -> at most {k_cap} phase(s) per chunk")
budget = left - reserve - 10
print(f"[slice] time: {left} s left - {reserve} s kept for the tests - 10 s margin = {budget} s for the slice")
rate = compile_s = None
try:
    with open(tp_json) as f:
        r = json.load(f)["results"]["ours"]
    rate, compile_s = float(r["steps_per_second"]), float(r["compile_seconds"])
except Exception as e:
    print(f"[slice] no measured rate ({tp_json}: {type(e).__name__}: {e}); one phase per chunk, one chunk per group")
k, chunks = 1, 1
if rate:
    eff = SAFETY * rate
    overhead = STARTUP + n_groups * 2 * compile_s
    avail = budget - overhead
    phase_s = cells_per_group * phase / eff  # one phase of one group's grid
    k_time = int(avail // (n_groups * evals * phase_s)) if avail > 0 else 0
    k = max(1, min(k_cap, k_time))
    chunk_s = k * phase_s
    chunks = evals if k_time >= 1 else max(1, int(avail // (n_groups * chunk_s)) if avail > 0 else 1)
    print(f"[slice] measured on {task}: ours {rate:,.0f} env steps/s, compile {compile_s:.1f} s; assumed grid rate "
          f"{SAFETY} x {rate:,.0f} = {eff:,.0f} env steps/s (evaluation, checkpoints and host work are not in the "
          f"benchmark); overhead = {STARTUP} s start + {n_groups} groups x 2 x {compile_s:.1f} s compile = "
          f"{overhead:.0f} s -> {avail:.0f} s to train")
    print(f"[slice] one phase of a group = {cells_per_group} cells x {phase:,} / {eff:,.0f} = {phase_s:.2f} s; the "
          f"whole slice at k phases per chunk = {n_groups} x {evals} x k x {phase_s:.2f} s -> k <= {k_time} in "
          f"{avail:.0f} s, k <= {k_cap} under the cap: k = {k}")
    why = ("" if chunks == evals else
           f" ({avail:.0f} s / ({n_groups} x {chunk_s:.1f} s)" if avail > 0 else " (no time is left after the overhead)")
    print(f"[slice] chunk = {chunk_s:.1f} s per group; --max-chunks {chunks} of {evals}{why}"
          + ("" if chunks == evals else ": the slice does not finish in this run; rerunning the script continues it "
             "from its checkpoints"))
steps = k * evals * phase
print(f"[slice] total_env_steps = {k} x {evals} x {phase:,} = {steps:,} per cell, {steps * cells:,} for the whole "
      f"slice (cap {cap:,.0f}); this run: {chunks} chunk(s) x {k * phase:,} x {cells} cells = "
      f"{chunks * k * phase * cells:,} env steps" + (f", estimated {overhead + n_groups * chunks * chunk_s:.0f} s"
                                                     if rate else ""))
with open(plan, "w") as f:
    f.write(f"SLICE_STEPS={steps}\nSLICE_CHUNKS={chunks}\n")
EOF
}

collect_slice() {  # the slice's small files (tables, JSON) into OUT_DIR/slice; checkpoints stay behind
  [ -d "$SLICE_DIR" ] || return 0
  (cd "$SLICE_DIR" && find . -path '*/checkpoint' -prune -o -type f \( -name '*.csv' -o -name '*.json' \) -print \
    | while read -r f; do mkdir -p "$OUT_DIR/slice/$(dirname "$f")" && cp "$f" "$OUT_DIR/slice/$f"; done)
  echo "[slice] tables copied to $OUT_DIR/slice: $(find "$OUT_DIR/slice" -type f 2>/dev/null | wc -l) files"
}

export LOCO_JSON SLICE_DIR
export -f size_slice collect_slice
if want slice; then
  SLICE_STEPS=""; SLICE_CHUNKS=""
  rm -f "$OUT_DIR/slice_plan.env"
  run_step slice_sizing 5 60 size_slice
  if [ -f "$OUT_DIR/slice_plan.env" ]; then . "$OUT_DIR/slice_plan.env"; fi
  # a rerun continues the slice an earlier run started: its env steps per cell are part of the run's
  # identity (lag_sweep refuses other settings), so they come from that run, whatever this one measured
  kept_steps=$(sed -n 's/^SLICE_STEPS=//p' "$SLICE_DIR/gpu_check_slice_steps.env" 2>/dev/null)
  if [ -n "$SLICE_STEPS" ] && [ -n "$kept_steps" ] && [ -f "$SLICE_DIR/run.json" ]; then
    echo "[slice] continuing the slice in $SLICE_DIR: total_env_steps $kept_steps per cell, as its first run sized it" \
      "(this run sized $SLICE_STEPS; GPU_CHECK_SLICE_DIR=<another folder> starts afresh)"
    SLICE_STEPS=$kept_steps
  fi
  if [ -n "$SLICE_STEPS" ]; then
    mkdir -p "$SLICE_DIR" && echo "SLICE_STEPS=$SLICE_STEPS" > "$SLICE_DIR/gpu_check_slice_steps.env"
    # seconds for the slice: what is left minus the tests' share (its timeout is the slice's budget)
    slice_cap=$(($(left) - TEST_RESERVE))
    if [ "$slice_cap" -lt 30 ]; then
      ORDER+=(slice); RC[slice]=skipped; SECS[slice]=0
      echo "=== [slice] SKIPPED: $(left) s left - $TEST_RESERVE s kept for the tests = $slice_cap s, this step needs >= 30 s"
    else
      # shellcheck disable=SC2086
      run_step slice 30 "$slice_cap" "$PY" experiments/lag_sweep.py --preset "$PRESET" --tasks "$LOCO" \
        --methods $METHODS --lag-depths $LAGS --seeds $SEEDS --total-env-steps "$SLICE_STEPS" \
        --max-chunks "$SLICE_CHUNKS" --out "$SLICE_DIR" --no-progress --no-figures
      collect_slice
    fi
  else
    ORDER+=(slice); RC[slice]=skipped; SECS[slice]=0
    echo "=== [slice] SKIPPED: sizing did not produce a plan"
  fi
else
  echo "=== [slice] not requested (GPU_CHECK_STEPS)"
fi

# ----------------------------------------------------------------------------- (d) sharding / resume tests

device_check() {  # the grid sharded over the real local devices vs one device; stop after 1 chunk + resume
  local d="${TMPDIR:-/tmp}/gpu_check_devices.$UID"  # fixed name: a run killed by its timeout leaves one
  rm -rf "$d" && mkdir -p "$d" || return 1
  "$PY" - "$d" <<'EOF'
import sys, time
import jax
import numpy as np
from vaco_jax import sweep
from vaco_jax.core.config import Config

root = sys.argv[1]
devs = jax.devices()
n = len(devs)
print(f"[devices] {n} x {devs[0].device_kind} ({jax.default_backend()}): {devs}")
config = Config(env="point_mass", method="ppo_clip", num_envs=8, unroll_length=16, total_env_steps=8 * 16 * 6,
                num_evals=3, eval_episodes=0, episode_length=20, num_epochs=2, num_minibatches=2, buffer_capacity=8)
cells = sweep.grid([1, 4, 2], list(range(n + 1)))  # 3(n+1) cells: padded to a multiple of n when n > 1
t = time.perf_counter()
sharded = sweep.run_group(config, cells, f"{root}/sharded", progress=False, shard=True, checkpoint=False)
single = sweep.run_group(config, cells, f"{root}/single", progress=False, shard=False, checkpoint=False)
assert sweep.run_group(config, cells, f"{root}/resumed", progress=False, max_chunks=1) is None
resumed = sweep.run_group(config, cells, f"{root}/resumed", progress=False)
print(f"[devices] {len(cells)} cells, 3 chunks each: sharded over {n} device(s), on one device, and stopped after "
      f"chunk 1 + resumed ({time.perf_counter() - t:.1f} s)")
ok = True
for name, rows in (("sharded", sharded), ("resumed", resumed)):
    for key in ("train_return_last5pct", "mean_policy_loss", "mean_clip_fraction"):
        a = np.array([r[key] for r in rows], float)
        b = np.array([r[key] for r in single], float)
        same_nan = np.isnan(a) == np.isnan(b)
        rel = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b) / (np.abs(b) + 1e-6))
        diff = float(np.max(rel)) if bool(same_nan.all()) else float("nan")
        good = bool(np.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True))
        ok &= good
        print(f"[devices] {name} vs one device, {key}: max relative difference {diff:.2e} "
              f"({'ok' if good else 'DIFFERS'}, rtol 1e-4)")
print(f"[devices] {'PASSED' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
EOF
  local rc=$?
  rm -rf "$d"
  return $rc
}

export -f device_check
if want tests; then
  # As written, these tests force N host (CPU) devices in subprocesses; run the whole of pytest on the
  # CPU so its in-process reference run is on the same backend as the runs it is compared with.
  collect=()
  [ "$DRY" = 1 ] && collect=(--collect-only)
  run_step device_check 20 0 device_check
  run_step tests_integrity 20 0 env JAX_PLATFORMS=cpu "$PY" -m pytest -q -p no:cacheprovider "${collect[@]}" \
    tests/test_integrity.py -k device_count
  run_step tests_sweep 20 0 env JAX_PLATFORMS=cpu "$PY" -m pytest -q -p no:cacheprovider "${collect[@]}" \
    tests/test_sweep.py -k interrupted
else
  echo "=== [tests] not requested (GPU_CHECK_STEPS)"
fi

# ----------------------------------------------------------------------------- summary

echo
echo "gpu_check summary (+$(elapsed) s of the $BUDGET s budget):"
summary_args=()
for name in "${ORDER[@]}"; do
  printf '  %-34s exit %-8s %5s s\n' "$name" "${RC[$name]}" "${SECS[$name]}"
  summary_args+=("$name=${RC[$name]}=${SECS[$name]}")
done
"$PY" - "$OUT_DIR" "$(elapsed)" "$BUDGET" "$DRY" "${summary_args[@]}" <<'EOF' || echo "summary.json FAILED"
import glob, json, os, sys
out_dir, elapsed, budget, dry = sys.argv[1:5]
summary = {"elapsed_s": int(elapsed), "budget_s": int(budget), "dry_run": dry == "1", "steps": {}}
for item in sys.argv[5:]:
    name, rc, secs = item.rsplit("=", 2)
    summary["steps"][name] = {"exit": int(rc) if rc.lstrip("-").isdigit() else rc, "seconds": int(secs)}
for path in sorted(glob.glob(os.path.join(out_dir, "throughput_*.json"))):
    try:
        with open(path) as f:
            res = json.load(f)["results"]
        summary[os.path.basename(path)[:-5]] = {k: res[k].get("steps_per_second") for k in res
                                                if isinstance(res[k], dict) and "steps_per_second" in res[k]}
    except Exception as e:
        summary[os.path.basename(path)] = f"unreadable: {e}"
plan = os.path.join(out_dir, "slice_plan.env")
if os.path.exists(plan):
    summary["slice_plan"] = dict(line.strip().split("=", 1) for line in open(plan) if "=" in line)
try:
    with open(os.path.join(out_dir, "versions.json")) as f:
        summary["versions"] = json.load(f)
except OSError:
    pass
with open(os.path.join(out_dir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print(f"written: {out_dir}/summary.json")
EOF
echo "gpu_check: done at +$(elapsed) s; log: $LOG"
exec 1>&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit 0
