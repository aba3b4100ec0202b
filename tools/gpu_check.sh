#!/usr/bin/env bash
# The GPU check on a machine with no network (docs/backends.md, "A machine with no network"): carried wheels, carried data,
# `gpubench run --here` on JAX: the chapters on the GPU in the full profile, a short CPU pass
# with JAX_PLATFORMS=cpu, then one report of both. Writes OUT/gpu-check.tar.gz (the run dirs).
#   WHEELS=.whl DATA=.gpudata OUT=runs/gpu-check bash tools/gpu_check.sh
set -uo pipefail
WHEELS=${WHEELS:-.whl}
DATA=$(cd "${DATA:-.gpudata}" && pwd) || exit 1
OUT=${OUT:-runs/gpu-check}
SITE=${SITE:-/tmp/gpubench-site}
mkdir -p "$OUT"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
RUNS="${RUNS:-$OUT/runs}"
mkdir -p "$RUNS"
nvidia-smi -L
python3 -m gpubench doctor --gpu || exit 1
# The MNIST chapters on Fashion-MNIST's real files; CIFAR-10 is not carried: labelled synthetic.
DATA_ARGS=(-p "Mnist_MLP_h1000:dataset=fashion_mnist" -p "Mnist_CNN:dataset=fashion_mnist"
           -p "Mnist_MLP_h1000:data_source=dir" -p "Mnist_CNN:data_source=dir"
           -p "Mnist_MLP_h1000:data_dir=$DATA" -p "Mnist_CNN:data_dir=$DATA"
           -p "Keras_Cifar_CNN:data_source=synthetic")
CHAPTERS=performanceTest,Mnist_MLP_h1000,Mnist_CNN,Keras_Cifar_CNN
timeout "${GPU_SECONDS:-170}" python3 -m gpubench run --here --profile full \
  --notebooks "$CHAPTERS" "${DATA_ARGS[@]}" -p "performanceTest:devices=[\"gpu\"]" \
  --out "$RUNS/jax-gpu"
echo "GPU run: exit $?"
JAX_PLATFORMS=cpu timeout "${CPU_SECONDS:-90}" python3 -m gpubench run --here --profile full \
  --notebooks performanceTest,Mnist_MLP_h1000 "${DATA_ARGS[@]}" \
  -p "performanceTest:dtype=float32" -p "performanceTest:sizes=[500,1000,2000,3000,4000,5000]" \
  -p "Mnist_MLP_h1000:epochs=5" --out "$RUNS/jax-cpu"
echo "CPU run: exit $?"
python3 -m gpubench report "$RUNS/jax-gpu" "$RUNS/jax-cpu" --out "$RUNS/report"
echo "report: exit $?"
tar -czf "$OUT/gpu-check.tar.gz" -C "$RUNS" .
cp "$RUNS/report/report.md" "$OUT/" 2>/dev/null; head -c 6000 "$RUNS/report/report.md"
