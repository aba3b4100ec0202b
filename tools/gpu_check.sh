#!/usr/bin/env bash
# The GPU check on a machine with no network (docs/backends.md, "A machine with no network"):
# carried wheels, carried data, `gpubench run --here` on one Keras backend (BACKEND=jax, the
# default, or torch on the machine's own PyTorch), the book's table complete on both sides in
# one call of at most BUDGET seconds (default 530: a 9-minute device call):
#   1. the GPU env (jax-gpu, torch-gpu): performanceTest on the GPU (float32 as it runs, TF32
#      where the backend allows it, and true float32 with TF32 off; bfloat16, float16; the
#      aligned sizes beside the 16-bit ones) and on the CPU of the same env (float32) at the
#      same SIZES, so that every GPU size has a CPU partner; then the three book models,
#      15 epochs each (full profile);
#   2. the CPU env (jax-cpu with JAX_PLATFORMS=cpu; torch-cpu with the GPUs hidden from
#      PyTorch by CUDA_VISIBLE_DEVICES=""): the three book models, 15 epochs each, with what is left
#      of the budget: the CPU half of the book's table;
#   3. one report of both. Writes OUT/gpu-check.tar.gz (the run dirs) and OUT/report.md.
#   WHEELS=.whl DATA=.gpudata OUT=runs/gpu-check bash tools/gpu_check.sh
#   BACKEND=torch WHEELS=.whl DATA=.gpudata OUT=runs/gpu-check-torch bash tools/gpu_check.sh
# The device check calls it twice: BACKEND=jax (the default), then BACKEND=torch.
# Rehearse it on a machine without a GPU (no nvidia-smi; the sweep on the CPU, quick profile):
#   REHEARSE=1 DATA=/usr/share/datasets/fashion-mnist PATH=.venv-jax/bin:$PATH bash tools/gpu_check.sh
#   REHEARSE=1 BACKEND=torch DATA=... PATH=.venv-torch/bin:$PATH bash tools/gpu_check.sh
set -uo pipefail
WHEELS=${WHEELS:-.whl}
DATA=$(cd "${DATA:-.gpudata}" && pwd) || { echo "no data folder: set DATA" >&2; exit 1; }
OUT=${OUT:-runs/gpu-check}
SITE=${SITE:-/tmp/gpubench-site}
BUDGET=${BUDGET:-530}
REHEARSE=${REHEARSE:-}
mkdir -p "$OUT"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
BACKEND=${BACKEND:-jax}
case "$BACKEND" in
  jax) CPU_ONLY=(env JAX_PLATFORMS=cpu) ;;
  torch) CPU_ONLY=(env CUDA_VISIBLE_DEVICES=) ;;
  *) echo "BACKEND=$BACKEND: use jax or torch (the lent machine has no TensorFlow)" >&2; exit 2 ;;
esac
export KERAS_BACKEND=$BACKEND PYTHONUNBUFFERED=1
RUNS="${RUNS:-$OUT/runs}"
mkdir -p "$RUNS"
START=$SECONDS
left() { local n=$((BUDGET - (SECONDS - START))); echo $((n > 1 ? n : 1)); }

if [ -n "$REHEARSE" ]; then
  PROFILE=quick
  SIZES=${SIZES:-[500,1000]}
  GPU_SWEEP=()
  SWEEP_DEVICES='["cpu"]'
else
  PROFILE=full
  SIZES=${SIZES:-[500,1000,1500,2000,2500,3000,3500,4000,4500,5000]}
  nvidia-smi -L
  python3 -m gpubench doctor --gpu || exit 1
  GPU_SWEEP=(-p 'performanceTest:dtype=["float32","bfloat16","float16"]')
  SWEEP_DEVICES='["gpu"]'
fi
# Both sweeps at the same sizes; the chapter's true_float32 (on by default) times float32 twice
# on a GPU that may use TF32: as it runs ("float32 (TF32)") and with TF32 off.
SWEEP=(-p "performanceTest:sizes=$SIZES")
# The MNIST chapters on Fashion-MNIST's real files; CIFAR-10 is not carried: labelled synthetic.
DATA_ARGS=(-p "Mnist_MLP_h1000:dataset=fashion_mnist" -p "Mnist_CNN:dataset=fashion_mnist"
           -p "Mnist_MLP_h1000:data_source=dir" -p "Mnist_CNN:data_source=dir"
           -p "Mnist_MLP_h1000:data_dir=$DATA" -p "Mnist_CNN:data_dir=$DATA"
           -p "Keras_Cifar_CNN:data_source=synthetic")
MODELS=Mnist_MLP_h1000,Mnist_CNN,Keras_Cifar_CNN

# 1. The GPU env: the sweep on the GPU, the same env's CPU sweep (float32, the book's pairing),
#    then the three models. Each step is a run dir of its own; the report joins them.
timeout "$(left)" python3 -m gpubench run --here --profile "$PROFILE" --notebooks performanceTest \
  -p "performanceTest:devices=$SWEEP_DEVICES" "${SWEEP[@]}" "${GPU_SWEEP[@]}" \
  --out "$RUNS/gpu-sweep"
echo "GPU env, sweep on its GPU: exit $? at $((SECONDS - START)) s"
if [ -z "$REHEARSE" ]; then  # a rehearsal's first sweep was on the CPU already
  timeout "$(left)" python3 -m gpubench run --here --profile "$PROFILE" \
    --notebooks performanceTest -p 'performanceTest:devices=["cpu"]' \
    -p 'performanceTest:dtype="float32"' "${SWEEP[@]}" --out "$RUNS/gpu-env-cpu-sweep"
  echo "GPU env, sweep on its CPU: exit $? at $((SECONDS - START)) s"
fi
timeout "$(left)" python3 -m gpubench run --here --profile "$PROFILE" --notebooks "$MODELS" \
  "${DATA_ARGS[@]}" --out "$RUNS/gpu-models"
echo "GPU env, the three models: exit $? at $((SECONDS - START)) s"

# 2. The CPU env: the same three models with the backend on the CPU only, in what is left.
"${CPU_ONLY[@]}" timeout "$(left)" python3 -m gpubench run --here --profile "$PROFILE" \
  --notebooks "$MODELS" "${DATA_ARGS[@]}" --out "$RUNS/cpu-models"
echo "CPU env, the three models: exit $? at $((SECONDS - START)) s"

# 3. One report of every run dir (a cut-short one still reports what it measured).
DIRS=()
for d in gpu-sweep gpu-env-cpu-sweep gpu-models cpu-models; do
  [ -f "$RUNS/$d/results.jsonl" ] && DIRS+=("$RUNS/$d")
done
python3 -m gpubench report "${DIRS[@]}" --out "$RUNS/report" 2>&1 | tail -5
echo "report: exit ${PIPESTATUS[0]} at $((SECONDS - START)) s"
tar -czf "$OUT/gpu-check.tar.gz" -C "$RUNS" .
cp "$RUNS/report/report.md" "$OUT/" 2>/dev/null; head -c 6000 "$RUNS/report/report.md"
