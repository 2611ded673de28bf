#!/usr/bin/env bash
# SubMix §4.2 random-code extraction on SmolLM2-135M: 8 users × one 4-digit code, g = 100
# generations per model; writes bench/results/extraction.json.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
.venv/bin/privlm audit extraction --model smollm2-135m --codes 8 --length 4 --generations 100 \
  --epochs 60 --lr 3e-3 --seed 0 --json > bench/results/extraction.json
python3 -c "import json; d=json.load(open('bench/results/extraction.json')); [print(r['method'], r['hit_rate'], r['epsilon_spent']) for r in d['results']]"
