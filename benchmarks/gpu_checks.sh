#!/usr/bin/env bash
# The checks that need a real GPU, as one script for a short lease of a GPU machine:
# the real-GPU tests (kernels against the reference, gnnc.torch ops and gnnc.nn layers on CUDA
# tensors against the CPU), then the GPU benchmarks. Each step has its own time limit so that
# one that hangs still leaves the others' output; logs go to $OUT (or ./gpu-logs).
#
#     OUT=/tmp/out bash benchmarks/gpu_checks.sh
set -u
out=${OUT:-gpu-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=".:${PYTHONPATH:-}"
export GNNC_CACHE_DIR=${GNNC_CACHE_DIR:-/tmp/gnnc-gpu-cache}
py=${PYTHON:-python3}

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s)"
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    tail -n "${TAIL:-25}" "$out/$name.log"
    echo "=== $name: exit $rc after $((SECONDS - start))s"
}

nvidia-smi -L 2>&1 | head -2
$py -c "import torch, llvmlite, xdsl; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'llvmlite', llvmlite.__version__, torch.cuda.get_device_name())"
step tests "${TEST_LIMIT:-170}" $py -m pytest -q -p no:cacheprovider -n "${WORKERS:-8}" -k "real or cuda_tensors_match or strided" \
    tests/test_cuda_runtime.py tests/test_torch_cuda.py tests/test_nn_cuda.py
step spmm "${SPMM_LIMIT:-60}" $py benchmarks/gpu.py --scales 16,18 --features 32,128
step nn "${NN_LIMIT:-180}" $py benchmarks/nn.py --device cuda --graphs "${NN_GRAPHS:-rmat-18}" \
    --frameworks pyg,gnnc --models "${NN_MODELS:-gcn,sage_mean,gat,gin,sage_max}" --hidden 64,256 --reps 5 \
    --warmup 2 --json "$out/nn.json"
