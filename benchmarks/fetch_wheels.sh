#!/usr/bin/env bash
# Download, on a machine WITH network access, the wheels that an offline GPU machine needs to run
# this project next to its own CUDA jax: brax, mujoco, mujoco-mjx, tyro, the other runtime
# dependencies that a Python with only jax/jaxlib/flax/optax/chex/orbax-checkpoint lacks, pytest
# (for benchmarks/gpu_check.sh's tests) and setuptools/wheel (to build the project's editable
# install without an index).
#
#   bash benchmarks/fetch_wheels.sh [WHEELS_DIR]        # default: wheels/ (git-ignored)
#   bash benchmarks/fetch_wheels.sh --gpu-machine [WHEELS_DIR]
#
# --gpu-machine: only what a GPU machine with a data-science image lacks (CPython 3.12 only; the
# distributions in GPU_MACHINE_HAS below are skipped), small enough to travel with the repository
# to a machine that takes a working tree of at most 64 MiB (about 39 MB of wheels, measured).
# benchmarks/gpu_check.sh still installs only what the machine's Python lacks, and names any
# distribution it can find neither there nor in the folder.
#
# Versions are read from requirements.lock (setuptools/wheel, which the lock does not hold, are
# pinned below). Wheels only (--only-binary=:all:), no dependency resolution (--no-deps: the list is
# the whole set), for Linux x86_64 and each CPython in PYTHON_VERSIONS (default "3.11 3.12").
# jax, jaxlib and the CUDA plugins are deliberately NOT downloaded: the GPU machine keeps its own.
# benchmarks/gpu_check.sh installs, from this folder, only the distributions its Python lacks.
#
# Environment: PIP (default: .venv/bin/pip if present, else "python3 -m pip"), PYTHON_VERSIONS,
# EXTRA_PACKAGES (more "name==version" specs, space-separated).
set -u -o pipefail

cd "$(dirname "$0")/.."
GPU_MACHINE=0
WHEELS_DIR=""
for arg in "$@"; do
  case $arg in
    --gpu-machine) GPU_MACHINE=1 ;;
    -*) echo "fetch_wheels: unknown option $arg; allowed: --gpu-machine, then an optional WHEELS_DIR" >&2; exit 2 ;;
    *) if [ -n "$WHEELS_DIR" ]; then echo "fetch_wheels: one WHEELS_DIR only (got $WHEELS_DIR and $arg)" >&2; exit 2; fi
       WHEELS_DIR=$arg ;;
  esac
done
WHEELS_DIR=${WHEELS_DIR:-wheels}
if [ "$GPU_MACHINE" = 1 ]; then
  PYTHON_VERSIONS=${PYTHON_VERSIONS:-"3.12"}
else
  PYTHON_VERSIONS=${PYTHON_VERSIONS:-"3.11 3.12"}
fi
if [ -z "${PIP:-}" ]; then
  if [ -x .venv/bin/pip ]; then PIP=".venv/bin/pip"; else PIP="python3 -m pip"; fi
fi

# Runtime closure of the project minus what jax/jaxlib/flax/optax/chex/orbax-checkpoint already pull
# in (absl-py, etils, msgpack, numpy, scipy, ml_dtypes, opt_einsum, rich, pyyaml, tensorstore,
# protobuf, treescope, typing_extensions, ...), plus etils[epath]'s fsspec/zipp and pytest's own deps.
PACKAGES="brax mujoco mujoco-mjx tyro docstring_parser typeguard
  flask flask-cors blinker click itsdangerous Jinja2 MarkupSafe Werkzeug
  jaxopt ml_collections trimesh glfw PyOpenGL websockets pillow tensorboardX packaging
  matplotlib contourpy cycler fonttools kiwisolver pyparsing python-dateutil
  pandas tzdata tqdm fsspec zipp
  pytest iniconfig pluggy"
BUILD_PINS="setuptools==84.2.1 wheel==0.48.0"
# Already in the GPU machine's image (besides jax, jaxlib, flax, optax, chex, orbax-checkpoint) by
# its provider's package list; the build pins and packaging (which wheel needs) stay, because pip
# builds the editable install in an isolated environment that sees only the wheels folder.
GPU_MACHINE_HAS="click Jinja2 MarkupSafe Werkzeug pillow matplotlib contourpy cycler
  fonttools kiwisolver pyparsing python-dateutil pandas tqdm fsspec zipp pytest iniconfig pluggy"
if [ "$GPU_MACHINE" = 1 ]; then
  kept=""
  for name in $PACKAGES; do
    case " $(echo $GPU_MACHINE_HAS) " in *" $name "*) ;; *) kept="$kept $name" ;; esac
  done
  PACKAGES=$kept
fi

specs=()
missing=0
for name in $PACKAGES; do
  # requirements.lock spells names as pip freeze does; compare case-insensitively, '-' == '_'
  key=$(echo "$name" | tr 'A-Z_' 'a-z-')
  line=$(awk -F'==' -v k="$key" '{n=tolower($1); gsub("_","-",n); if (n==k) print $0}' requirements.lock)
  if [ -z "$line" ]; then
    echo "fetch_wheels: $name is not in requirements.lock" >&2
    missing=1
  else
    specs+=("$line")
  fi
done
[ "$missing" = 0 ] || exit 2
specs+=($BUILD_PINS ${EXTRA_PACKAGES:-})

mkdir -p "$WHEELS_DIR"
status=0
for pv in $PYTHON_VERSIONS; do
  abi="cp${pv/./}"
  echo "== CPython $pv ($abi), manylinux x86_64: ${#specs[@]} distributions -> $WHEELS_DIR"
  # PIP_CONSTRAINT= : a machine-wide constraints file must not change the pinned versions.
  if ! PIP_CONSTRAINT= $PIP download --quiet --only-binary=:all: --no-deps \
      --implementation cp --python-version "$pv" --abi "$abi" --abi abi3 --abi none \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform linux_x86_64 --platform any \
      -d "$WHEELS_DIR" "${specs[@]}"; then
    echo "fetch_wheels: download for CPython $pv FAILED" >&2
    status=1
  fi
done
{
  echo "# written by benchmarks/fetch_wheels.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) for CPython $PYTHON_VERSIONS"
  printf '%s\n' "${specs[@]}"
} > "$WHEELS_DIR/REQUESTED.txt"
echo "== $(ls "$WHEELS_DIR"/*.whl 2>/dev/null | wc -l) wheels, $(du -sh "$WHEELS_DIR" | cut -f1) in $WHEELS_DIR"
if [ "$GPU_MACHINE" = 1 ]; then
  mib=$(( $(du -sk "$WHEELS_DIR" | cut -f1) / 1024 ))
  repo_mib=$(( $(git ls-files -z | xargs -0 du -ckb 2>/dev/null | tail -1 | cut -f1) / 1024 / 1024 ))
  echo "== wheels $mib MiB + tracked files $repo_mib MiB = $((mib + repo_mib)) MiB (a 64 MiB working-tree limit leaves $((64 - mib - repo_mib)) MiB)"
  [ $((mib + repo_mib)) -lt 64 ] || { echo "fetch_wheels: over 64 MiB: empty the folder of older wheels first" >&2; status=1; }
fi
exit $status
