#!/usr/bin/env bash
# Usage: launch/local.sh NUM_PROCESSES CONFIG WORKDIR [--config.x=v ...]
#
# Runs NUM_PROCESSES `prd-jax train` processes on this machine as one jax.distributed job
# (coordinator 127.0.0.1:PRD_PORT; each process gets PRD_COORDINATOR, PRD_NUM_PROCESSES and
# its PRD_PROCESS_ID). By default they run on CPU with DEVICES_PER_PROCESS simulated devices
# each (XLA_FLAGS=--xla_force_host_platform_device_count), so a multi-host mesh can be tried
# on a laptop. Waits for all of them; exits non-zero if any fails (the others are stopped).
#
# Settings (environment variables):
#   DEVICES_PER_PROCESS  simulated CPU devices per process (default 2)
#   PLATFORM             JAX_PLATFORMS for the processes (default cpu; e.g. cuda)
#   PRD_PORT             coordinator port (default 12356)
#   PRD_JAX              the prd-jax executable (default: .venv/bin/prd-jax of this checkout
#                        if present, else prd-jax from PATH)
#   LOG_DIR              per-process logs proc_<id>.log (default: a new temporary directory)
#
# Example: 2 processes x 2 CPU devices train the tiny SFT config for 3 steps:
#   launch/local.sh 2 configs/sft/tiny.py /tmp/sft_tiny_mp --config.steps=3 --config.mesh=fsdp=-1
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: launch/local.sh NUM_PROCESSES CONFIG WORKDIR [--config.x=v ...]" >&2
  exit 2
fi
NUM_PROCESSES="$1"; CONFIG="$2"; WORKDIR="$3"; shift 3
if ! [[ "$NUM_PROCESSES" =~ ^[1-9][0-9]*$ ]]; then
  echo "local.sh: NUM_PROCESSES must be a positive integer, got '$NUM_PROCESSES'" >&2
  exit 2
fi

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEVICES_PER_PROCESS="${DEVICES_PER_PROCESS:-2}"
PLATFORM="${PLATFORM:-cpu}"
PRD_PORT="${PRD_PORT:-12356}"
if [[ -z "${PRD_JAX:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/prd-jax" ]]; then PRD_JAX="$REPO/.venv/bin/prd-jax"; else PRD_JAX=prd-jax; fi
fi
LOG_DIR="${LOG_DIR:-$(mktemp -d -t prd_jax_local.XXXXXX)}"
mkdir -p "$LOG_DIR"

set -m  # job control: each process below leads its own process group (pgid = its pid)
pids=()
stop_all() {  # stop the process groups this script started, if still running
  local pid
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
}
trap 'stop_all; exit 130' INT TERM

for ((i = 0; i < NUM_PROCESSES; i++)); do
  if [[ "$PLATFORM" == cpu ]]; then
    xla_flags="${XLA_FLAGS:-} --xla_force_host_platform_device_count=$DEVICES_PER_PROCESS"
  else
    xla_flags="${XLA_FLAGS:-}"
  fi
  PRD_COORDINATOR="127.0.0.1:$PRD_PORT" PRD_NUM_PROCESSES="$NUM_PROCESSES" PRD_PROCESS_ID="$i" \
  JAX_PLATFORMS="$PLATFORM" XLA_FLAGS="$xla_flags" \
    "$PRD_JAX" train --no-progress --config "$CONFIG" --workdir "$WORKDIR" "$@" \
    > "$LOG_DIR/proc_$i.log" 2>&1 &
  pids+=("$!")
done
echo "local.sh: started $NUM_PROCESSES processes (pids ${pids[*]}); logs in $LOG_DIR" >&2

# Poll until every process has ended; on the first failure stop the rest.
statuses=()
rc=0
finished=0
while (( finished < NUM_PROCESSES )); do
  for ((i = 0; i < NUM_PROCESSES; i++)); do
    if [[ -n "${statuses[$i]:-}" ]] || kill -0 "${pids[$i]}" 2>/dev/null; then continue; fi
    s=0
    wait "${pids[$i]}" || s=$?
    statuses[$i]="$s"
    finished=$((finished + 1))
    if [[ "$s" -ne 0 ]]; then
      echo "local.sh: process $i exited with status $s; last lines of $LOG_DIR/proc_$i.log:" >&2
      tail -n 20 "$LOG_DIR/proc_$i.log" >&2 || true
      if [[ "$rc" -eq 0 ]]; then
        echo "local.sh: stopping the other processes" >&2
        stop_all
      fi
      rc=1
    fi
  done
  if (( finished < NUM_PROCESSES )); then sleep 1; fi
done
echo "local.sh: exit status per process: ${statuses[*]}" >&2
exit "$rc"
