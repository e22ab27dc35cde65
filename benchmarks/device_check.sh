#!/usr/bin/env bash
# The accelerator check of issue 48 §4 (docs/development.md, "Accelerator check"): SmolLM2
# greedy tokens, sampler tok/s and HBM roofline share, train-step MFU and MoE dispatch, each
# beside its reference in the same run, on one GPU (benchmarks/device_check.py).
#
#   bash benchmarks/device_check.sh --fetch-wheels DIR   # here, with pip: the wheels that travel
#   bash benchmarks/device_check.sh [--wheels DIR] [device_check.py options]   # on the GPU machine
#   bash benchmarks/device_check.sh --dry-run            # every stage, tiny shapes, on the CPU
#
# --wheels DIR installs (pip, no index, no dependencies) each wheel in DIR whose distribution
# the Python lacks into a temporary folder on PYTHONPATH; the repository root is on PYTHONPATH
# too, so the project needs no install. PYTHON is the interpreter (default: .venv/bin/python
# where the repository has one, else python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x $root/.venv/bin/python ]]; then python=$root/.venv/bin/python; else python=python3; fi
fi
wheels=""
fetch=""
args=()

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case $1 in
    --wheels) [[ $# -ge 2 ]] || { echo "device_check.sh: --wheels needs a folder" >&2; exit 2; }
              wheels=$2; shift 2 ;;
    --fetch-wheels) [[ $# -ge 2 ]] || { echo "device_check.sh: --fetch-wheels needs a folder" >&2; exit 2; }
                    fetch=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done

# The pins of the wheels that travel (benchmarks/device_check_wheels.txt), from constraints.txt.
pins() {
  local name pin
  while read -r name; do
    pin=$(grep -i -E "^${name//[-_]/[-_]}==" "$root/constraints.txt" || true)
    [[ -n $pin ]] || { echo "device_check.sh: $name is not pinned in constraints.txt" >&2; return 1; }
    echo "$pin"
  done < <(sed -e 's/#.*//' -e '/^image:/d' -e 's/[[:space:]]//g' -e '/^$/d' "$root/benchmarks/device_check_wheels.txt")
}

if [[ -n $fetch ]]; then
  mkdir -p "$fetch"
  mapfile -t want < <(pins)
  "$python" -m pip download --no-deps --only-binary=:all: -d "$fetch" "${want[@]}"
  echo "wheels for the GPU machine in $fetch: ${want[*]}"
  exit 0
fi

if [[ -n $wheels ]]; then
  [[ -d $wheels ]] || { echo "device_check.sh: --wheels $wheels is not a folder" >&2; exit 2; }
  site=$(mktemp -d)
  trap 'rm -rf "$site"' EXIT
  missing=()
  for whl in "$wheels"/*.whl; do
    [[ -e $whl ]] || { echo "device_check.sh: no .whl files in $wheels" >&2; exit 2; }
    dist=$(basename "$whl" | cut -d- -f1)
    if "$python" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" 2>/dev/null; then
      echo "device_check.sh: $dist is installed; not installing $(basename "$whl")"
    else
      missing+=("$whl")
    fi
  done
  if ((${#missing[@]})); then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${missing[@]}"
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# jax and torch share the GPU: jax allocates as it goes rather than taking 75% at start.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
for a in "${args[@]}"; do
  if [[ $a == --dry-run ]]; then export JAX_PLATFORMS=cpu; fi
done
if [[ ${DEVICE_CHECK_DRY_RUN:-} == 1 ]]; then export JAX_PLATFORMS=cpu; fi
cd "$root"
exec "$python" benchmarks/device_check.py "${args[@]}"
