#!/usr/bin/env bash
# The GPU check of the trainers work (issue 28), under 8 minutes: our JAX trainer's demo preset with
# monitoring off and on (tokens/s, MFU, overhead), the Hugging Face and Lightning integrations with
# and without gapwatch, CUDA tensors through Monitor.log, and bench_log_values on the device.
#   scripts/device_check.sh [--cpu]      (PYTHON=... picks the interpreter; default .venv/bin/python)
# Without a GPU (or with --cpu) it runs the same checks small, on the CPU, to show the script works.
# JAX and torch need their CUDA builds for the GPU (jax[cuda12], the default torch wheel): the line
# each check prints names the device it ran on.
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=/work/main/.venv/bin/python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WANDB_SILENT=true WANDB_ERROR_REPORTING=false

gpu=no
if [ "${1:-}" != "--cpu" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=yes
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
"$python" - <<'EOF'
import jax, torch
print(f"backends: jax {jax.__version__} on {jax.default_backend()}, torch {torch.__version__} "
      f"cuda={'yes: ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no'}")
EOF

if [ "$gpu" = yes ]; then
  device=auto; jax_steps=300; loop_steps=200; values_steps=500; limit=90
else
  echo "no GPU used: every check runs small on the CPU, as a smoke run (its timings say little)"
  device=cpu; jax_steps=10; loop_steps=10; values_steps=1; limit=180
fi

failed=0
check() {  # check SECONDS ARGS...: one check, bounded, its output passed through
  local limit=$1; shift
  if ! timeout "$limit" "$python" "$@" 2>&1 | grep -E "^(jax|hf|lightning|values|\||Device|Client)"; then
    echo "check '$*' failed or timed out after ${limit} s"; failed=1
  fi
}
started=$SECONDS
check 150 -m bench.device_check jax --steps "$jax_steps"
check "$limit" -m bench.device_check hf --steps "$loop_steps" --device "$device"
check "$limit" -m bench.device_check lightning --steps "$loop_steps" --device "$device"
check 60 -m bench.device_check values --steps "$values_steps" --device "$device"
[ "$gpu" = yes ] && check 90 -m bench.bench_log_values --quick --device cuda
echo "device check: $((SECONDS - started)) s"
exit $failed
