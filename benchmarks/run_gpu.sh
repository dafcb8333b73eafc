#!/usr/bin/env bash
# One prepared GPU check: the three benchmarks on the GPU, then the CUDA tests.
# Logs go to $OUT (default gpu_out/). Each step has its own time limit, so one
# slow step cannot eat the others.
#   OUT=gpu_out bash benchmarks/run_gpu.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu_out}
PY=${PY:-python3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, torch_geometric; print('torch', torch.__version__, 'pyg', torch_geometric.__version__)" | tee -a "$OUT/gpu.txt"
timeout 120 $PY -m benchmarks.bench_attention --device cuda --sizes 10000 50000 169343 500000 1000000 \
    --channels 64 128 --heads 1 4 --reps 10 2>&1 | tee "$OUT/attention.txt"
timeout 40 $PY -m benchmarks.bench_batched --device cuda --reps 10 2>&1 | tee "$OUT/batched.txt"
timeout 150 $PY -m benchmarks.bench_epoch --device cuda --hidden 64 --step-impl eager compile --reps 10 2>&1 | tee "$OUT/epoch.txt"
timeout 150 $PY -m pytest -q --tb=short -p no:cacheprovider -o log_level=WARNING tests/test_cuda.py > "$OUT/tests.txt" 2>&1
grep -E "passed|failed|Error|assert" "$OUT/tests.txt" | tail -20
