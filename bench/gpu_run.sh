#!/usr/bin/env bash
# One timed pass on a lent CUDA machine: the GPU tests, then bench_gpu.py at 1B and at 8B.
# Every stage is time-boxed so that a slow one cannot take the others' time, and every log
# and result lands under $OUT (default bench/results/gpu-run).
#
#   bench/gpu_run.sh            # on the GPU machine, from the repository root
#
# privlm runs from src/ (PYTHONPATH); wheels of what the machine's image lacks may be
# carried in .whl/ and are installed into /tmp/site first. Environment: TEST_S, BENCH1_S,
# PROFILE_S, BENCH8_S and LOOP8_S (seconds per stage, 0 skips it), SECTIONS1/SECTIONS8, and
# ARGS1/ARGS8/ARGSP (extra bench_gpu.py or profile flags, e.g. ARGS1='--tokens 128').
# Stages: the GPU tests; bench_gpu.py at 1B; the PMixED profile at 1B; bench_gpu.py at 8B;
# the PEFT-loop baseline alone at 8B (PMixED's own figure there comes from the 8B stage).
set -u
OUT=${OUT:-bench/results/gpu-run}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD/src:$PWD
else
  export PYTHONPATH=$PWD/src:$PWD
fi
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import torch, transformers, peft, opacus; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'peft', peft.__version__, 'opacus', opacus.__version__)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# a carried privlm cache (.gpucache: the converted tokenizer the tiny test model shares)
[ -d .gpucache ] && export PRIVLM_CACHE=$PWD/.gpucache

stage() {  # stage NAME SECONDS COMMAND...: run, time-boxed, logged
  local name=$1 limit=$2
  shift 2
  [ "$limit" -gt 0 ] || return 0
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s (limit $limit)"
  tail -n 25 "$OUT/$name.log"
}

stage test-gpu "${TEST_S:-150}" $PY -m pytest -q -m gpu tests/gpu -p no:cacheprovider \
  -o addopts="-ra --strict-markers" --timeout 150
stage bench-1b "${BENCH1_S:-220}" $PY bench/bench_gpu.py --models llama-3.2-1b \
  --sections "${SECTIONS1:-pmixed,submix,dpsgd,exposure,pate}" --out "$OUT/gpu-1b.json" ${ARGS1:-}
stage profile-1b "${PROFILE_S:-0}" $PY bench/profile_pmixed_gpu.py --model llama-3.2-1b ${ARGSP:-}
stage bench-8b "${BENCH8_S:-150}" $PY bench/bench_gpu.py --models llama-3.1-8b \
  --sections "${SECTIONS8:-dpsgd,pmixed}" --out "$OUT/gpu-8b.json" ${ARGS8:-}
stage loop-8b "${LOOP8_S:-0}" $PY bench/bench_gpu.py --models llama-3.1-8b --sections pmixed \
  --tokens 2 --rounds 1 --loop-tokens 1 --out "$OUT/gpu-8b-loop.json"
