"""Cost of DP-SGD per-sample gradients on a LoRA step (SmolLM2-135M), against a non-private
step at the same batch, in the same run: step time and peak memory (tracemalloc-free: RSS).

Modes: non-private (baseline); Opacus hooks; Opacus functorch; Opacus ghost clipping and
fast gradient clipping (per-sample norms only, a second backward pass for the clipped sum);
secure: hooks with privlm's secure mode, every noise coordinate from os.urandom (also
reported against hooks). Each step = forward, backward, (clip + noise), AdamW update, on
a batch of B examples of L tokens.

Usage: python bench/bench_dpsgd_step.py [--batch 8] [--length 128] [--steps 4]
Writes bench/results/dpsgd_step.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
MODES = ("hooks", "functorch", "ghost", "fast", "secure")

CHILD = r"""
import json, sys, time, resource, torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from peft import LoraConfig, get_peft_model
from privlm.models import load_public_model
from privlm.training.redaction import masked_lm_loss, per_example_losses
from privlm.training.lora_targets import discover_lora_targets
mode, B, L, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
lm = load_public_model("smollm2-135m")
model = get_peft_model(lm.model, LoraConfig(r=4, lora_alpha=32, target_modules=discover_lora_targets(lm.model), lora_dropout=0.0))
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4)
if mode in ("ghost", "fast"):
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping
    model = GradSampleModuleFastGradientClipping(model, max_grad_norm=1.0, use_ghost_clipping=(mode == "ghost"))
    opt = DPOptimizerFastGradientClipping(opt, noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=B)
elif mode != "nonprivate":
    model = GradSampleModule(model, force_functorch=(mode == "functorch"))
    opt = DPOptimizer(opt, noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=B)
    if mode == "secure":
        from privlm.training.secure_noise import install_csprng_noise
        install_csprng_noise(opt)
x = torch.randint(0, 49152, (B, L))
def step():
    opt.zero_grad(set_to_none=True)
    logits = model(input_ids=x).logits
    if mode in ("ghost", "fast"):
        DPTensorFastGradientClipping(model, opt, per_example_losses(logits, x), "mean").backward()
    else:
        masked_lm_loss(logits, x, per_example=True).backward()
    opt.step()
step()
t = time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({"step_s": (time.perf_counter() - t) / steps, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(mode: str, b: int, length: int, steps: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(b), str(length), str(steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    res = {m: run(m, a.batch, a.length, a.steps) for m in ("nonprivate", *MODES)}
    base = res["nonprivate"]
    for m in MODES:
        res[m]["time_ratio"] = res[m]["step_s"] / base["step_s"]
        res[m]["memory_ratio"] = res[m]["peak_rss_mb"] / base["peak_rss_mb"]
    res["secure"]["time_ratio_vs_hooks"] = res["secure"]["step_s"] / res["hooks"]["step_s"]
    out = {"model": "smollm2-135m", "batch": a.batch, "length": a.length, "modes": res}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dpsgd_step.json").write_text(json.dumps(out, indent=2))
    print(f"non-private LoRA step: {base['step_s']:.2f} s, peak RSS {base['peak_rss_mb']:.0f} MB")
    for m in MODES:
        r = res[m]
        print(
            f"DP-SGD ({m}): {r['step_s']:.2f} s = {r['time_ratio']:.2f}× ; peak RSS {r['peak_rss_mb']:.0f} MB = {r['memory_ratio']:.2f}×"
        )
    print(f"secure mode against hooks: {res['secure']['time_ratio_vs_hooks']:.3f}×")
    print(f"wrote {RESULTS / 'dpsgd_step.json'}")


if __name__ == "__main__":
    main()
