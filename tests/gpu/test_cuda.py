"""Every capability on a CUDA GPU against the CPU, on the tiny model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis import pmixed as pm
from privlm.models import load_public_model
from privlm.models.placement import resolve_placement
from privlm.predict import PMixED, PMixEDConfig
from privlm.predict.batching import DecodeBatch
from privlm.predict.engine import CachedDecoder, EnsembleEngine, Prefill
from privlm.predict.in_context import InContextEngine
from privlm.predict.submix_rule import submix_step
from privlm.training import dpsgd as dp
from privlm.training.lora_finetune import record_sequences
from privlm.training.lora_targets import discover_lora_targets
from privlm.training.redaction import masked_lm_loss
from tests.gpu.conftest import DEVICE
from tests.predict.exact import pmixed_poisson_output, submix_output, sym
from tests.training.test_dpsgd import CFG, dataset

CONTEXT = [504, 1723, 314, 260]
ROWS = [-1, 0, 1, 2, 3]


def engine_on(adapter_dirs, device, dtype):
    lm = load_public_model("tiny", device=device, dtype=dtype)
    return EnsembleEngine.from_directories(lm.model, adapter_dirs), lm.tokenizer


@pytest.mark.skipif(DEVICE != "cuda", reason="a dry run on the CPU")
def test_auto_is_cuda_in_bfloat16():
    place = resolve_placement("cuda", "auto")
    assert place.device.type == DEVICE
    assert place.dtype == (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32)
    lm = load_public_model("tiny", device=DEVICE)
    assert next(lm.model.parameters()).is_cuda
    assert lm.placement.describe()["device_name"] == torch.cuda.get_device_name()


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-4), ("bfloat16", 0.02)])
def test_engine_log_probs_on_the_gpu_match_the_cpu(adapter_dirs, dtype, tolerance):
    gpu, _ = engine_on(adapter_dirs, DEVICE, dtype)
    cpu, _ = engine_on(adapter_dirs, "cpu", "float32")
    lp_gpu, lp_cpu = gpu.log_probs(CONTEXT, ROWS), cpu.log_probs(CONTEXT, ROWS)
    assert lp_gpu.dtype == torch.float64 and lp_gpu.device.type == DEVICE
    assert (lp_gpu.exp().cpu() - lp_cpu.exp()).abs().max() < tolerance


def test_the_kv_cache_decodes_on_the_gpu_as_a_full_forward_pass(adapter_dirs):
    gpu, _ = engine_on(adapter_dirs, DEVICE, "float32")
    dec = CachedDecoder(gpu, CONTEXT, [0, 2], reserve=3)
    for token in (11, 12, 13):
        dec.advance(token)
    full = gpu.log_probs([*CONTEXT, 11, 12, 13], [0, 2])
    torch.testing.assert_close(dec.last, full, atol=1e-5, rtol=1e-4)


def test_chunked_prefill_and_batched_decoding_on_the_gpu_match_the_cpu(adapter_dirs):
    """Two requests of different lengths prefilled in chunks of 2, stacked into one
    left-padded cache on the GPU and decoded together: each row's next-token
    distribution is the CPU's for its own context."""
    gpu, _ = engine_on(adapter_dirs, DEVICE, "float32")
    cpu, _ = engine_on(adapter_dirs, "cpu", "float32")
    requests = [([*CONTEXT, 7, 8, 9], [-1, 0, 3]), (CONTEXT[:2], [-1, 2])]
    batch = DecodeBatch(gpu)
    for prompt, rows in requests:
        batch.join(SimpleNamespace(rows=rows), Prefill(gpu, prompt, rows, 2).run(chunk=2))
    for token in (11, 12):
        for slot in batch.slots:
            slot.pending = token
        batch.step()
    for slot, (prompt, rows) in zip(batch.slots, requests, strict=True):
        assert slot.last.device.type == DEVICE and slot.last.dtype == torch.float64
        want = cpu.log_probs([*prompt, 11, 12], rows)
        torch.testing.assert_close(slot.last.cpu(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_opacus_per_sample_gradients_on_the_gpu_equal_a_batch_size_one_loop(dtype):
    lm = load_public_model("tiny", device=DEVICE, dtype=dtype)
    torch.manual_seed(0)
    cfg = LoraConfig(
        r=4, lora_alpha=32, target_modules=discover_lora_targets(lm.model), init_lora_weights=False
    )
    model = get_peft_model(lm.model, cfg)
    ids, labels = record_sequences(
        lm.tokenizer, ["a short one", "a longer example here", "x y"], 16
    )
    ids, labels = ids.to(DEVICE), labels.to(DEVICE)
    gsm = GradSampleModule(model)
    attention = (labels != -100).long()
    masked_lm_loss(gsm(input_ids=ids, attention_mask=attention).logits, labels, True).backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 and p.device.type == DEVICE for _, p in params)
    batched = {n: p.grad_sample.clone() for n, p in params}
    gsm._close()
    tol = dict(atol=1e-5, rtol=1e-3) if dtype == "float32" else dict(atol=1e-2, rtol=5e-2)
    for i in range(len(ids)):
        model.zero_grad(set_to_none=True)
        sl = slice(i, i + 1)
        logits = model(input_ids=ids[sl], attention_mask=attention[sl]).logits
        masked_lm_loss(logits, labels[sl], per_example=True).backward()
        for n, p in params:
            torch.testing.assert_close(batched[n][i], p.grad, **tol)


@pytest.mark.parametrize("q", [1.0, 0.5])
def test_pmixed_charged_cost_bounds_the_exact_divergence_on_gpu_outputs(adapter_dirs, q):
    gpu, _ = engine_on(adapter_dirs, DEVICE, "bfloat16")
    probs = gpu.log_probs(CONTEXT, ROWS).exp().cpu().numpy()
    probs /= probs.sum(-1, keepdims=True)
    p0, models = probs[0], list(probs[1:])
    alpha, eps = 3, 0.2
    radius = pm.solve_radius(eps, alpha, len(models), q)
    charged = pm.query_rdp(radius, alpha, len(models), q)
    full = pmixed_poisson_output(models, p0, alpha, radius, q)
    for i in range(len(models)):
        without = pmixed_poisson_output(models[:i] + models[i + 1 :], p0, alpha, radius, q)
        assert sym(full, without, alpha) <= charged * (1 + 1e-9)


def test_submix_leakage_bounds_the_exact_divergence_on_gpu_outputs(adapter_dirs):
    gpu, _ = engine_on(adapter_dirs, DEVICE, "bfloat16")
    lp = gpu.log_probs(CONTEXT, ROWS)
    out = submix_step(lp[1::2], lp[2::2], lp[0], 2.0, 0.05, tol=1e-13)
    probs = lp.exp().cpu().numpy()
    parts = [(probs[1], probs[2]), (probs[3], probs[4])]
    released = out.log_probs.exp().cpu().numpy()
    for i in range(2):
        without = submix_output(parts[:i] + parts[i + 1 :], probs[0], 2.0, 0.05)
        assert float(out.leakage[i]) >= sym(released, without, 2.0) * (1 - 1e-9) - 1e-15


def test_pmixed_generates_end_to_end_on_the_gpu(adapter_dirs, tmp_path):
    gpu, tok = engine_on(adapter_dirs, DEVICE, "auto")
    cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=32, sample_rate=0.5)
    ledger = PrivacyLedger(tmp_path / "l.db", "gpu", Budget(8.0, 1e-5))
    gen = PMixED(gpu, tok, ledger, cfg).generate("The history of", max_new_tokens=8)
    assert 1 <= len(gen.token_ids) <= 8 and ledger.count() == len(gen.token_ids)


def test_in_context_members_on_the_gpu_match_the_cpu():
    def engine(device):
        lm = load_public_model("tiny", device=device, dtype="float32")
        tok = lm.tokenizer
        prompts = [tok(t)["input_ids"] for t in ("Ann lives in Rome.", "Bo paid 12 euros.", "")]
        return InContextEngine(lm.model, prompts, tok.eos_token_id), tok

    (gpu, _), (cpu, _) = engine(DEVICE), engine("cpu")
    rows = [-1, 0, 1, 2]
    lp_gpu, lp_cpu = gpu.log_probs(CONTEXT, rows), cpu.log_probs(CONTEXT, rows)
    assert lp_gpu.device.type == DEVICE
    assert (lp_gpu.exp().cpu() - lp_cpu.exp()).abs().max() < 1e-4


def test_capped_in_context_pmixed_generates_on_the_gpu(tmp_path):
    lm = load_public_model("tiny", device=DEVICE, dtype="auto")
    tok = lm.tokenizer
    prompts = [tok(f"Record {i}: the patient was seen.")["input_ids"] for i in range(6)]
    engine = InContextEngine(lm.model, prompts, tok.eos_token_id)
    cfg = PMixEDConfig(
        epsilon=8.0, delta=1e-5, alpha=3, queries=32, sample_rate=1.0, lambda_cap=0.5
    )
    ledger = PrivacyLedger(tmp_path / "l.db", "gpu", Budget(8.0, 1e-5))
    gen = PMixED(engine, tok, ledger, cfg).generate("The history of", max_new_tokens=8)
    assert 1 <= len(gen.token_ids) <= 8 and ledger.count() == len(gen.token_ids)


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_a_full_dpsgd_run_on_the_gpu(tmp_path, mode):
    cfg = dp.DpSgdConfig(target_epsilon=3.0, device=DEVICE, grad_sample_mode=mode, **CFG)
    st = dp.train_dpsgd("tiny", dataset(), tmp_path / "a", cfg, progress=False)
    assert st.epsilon <= 3.0 and st.device.startswith(DEVICE)
    saved = json.loads((tmp_path / "a" / "privacy.json").read_text())
    assert saved["device"].startswith(DEVICE) and saved["dtype"] in ("bfloat16", "float32")
    weights = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}


def test_a_checkpointed_dpsgd_run_on_the_gpu(tmp_path):
    cfg = dp.DpSgdConfig(
        target_epsilon=3.0, device=DEVICE, gradient_checkpointing=True, **{**CFG, "epochs": 1}
    )
    st = dp.train_dpsgd("tiny", dataset(24), tmp_path / "a", cfg, progress=False)
    assert st.epsilon <= 3.0


def test_the_dpsgd_noise_is_drawn_on_the_gpu():
    from privlm.randomness import PrivacyRandomness

    gen = PrivacyRandomness().torch_generator(torch.device(DEVICE))
    assert gen.device.type == DEVICE
    z = torch.randn(100_000, generator=gen, device=DEVICE)
    assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1) < 0.02


def test_prompt_dpsgd_and_its_accuracy_on_the_gpu(tmp_path):
    from privlm.data import Record
    from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, TaskExamples, train_prompt_dpsgd
    from privlm.prompting.serving import prompt_adapter_accuracy
    from privlm.prompting.tasks import get_task

    task = get_task("sst2")
    recs = [Record(f"film {i}", f"r{i}", "positive" if i % 2 else "negative") for i in range(24)]
    for kind in ("soft-prompt", "prefix"):
        cfg = PromptDpSgdConfig(kind=kind, virtual_tokens=4, batch_size=8, epochs=1, device=DEVICE)
        st = train_prompt_dpsgd(
            "tiny", TaskExamples(task, recs), tmp_path / kind, cfg, progress=False
        )
        assert st.device.startswith(DEVICE) and st.epsilon <= 8.0
        acc = prompt_adapter_accuracy("tiny", tmp_path / kind, task, recs[:8], device=DEVICE)
        assert 0.0 <= acc <= 1.0


def test_prompt_pate_teachers_answer_on_the_gpu_as_on_the_cpu():
    from privlm.data import Record
    from privlm.prompting.pate import make_teachers
    from privlm.prompting.pate_pipeline import teacher_answer_matrix
    from privlm.prompting.tasks import get_task

    task = get_task("sst2")
    recs = [Record(f"s {i}", f"s{i}", "positive" if i % 2 else "negative") for i in range(18)]
    teachers = make_teachers(recs, 6, 1, "ab" * 16)
    public = [Record(f"p {i}", f"p{i}") for i in range(5)]
    on = {
        d: teacher_answer_matrix(load_public_model("tiny", device=d, dtype="float32"), task,
                                 teachers, public, 16, False)
        for d in (DEVICE, "cpu")
    }  # fmt: skip
    assert (on[DEVICE].top1 == on["cpu"].top1).mean() >= 0.9  # float32: argmax ties aside
    assert (on[DEVICE].labels == on["cpu"].labels).mean() >= 0.9


def test_canary_exposure_on_the_gpu_matches_the_cpu():
    from privlm.audit.exposure import candidate_log_likelihoods

    scores = {
        d: candidate_log_likelihoods(
            load_public_model("tiny", device=d, dtype="float32").model,
            load_public_model("tiny", device="cpu").tokenizer, 3, max_rows=100, progress=False,
        )
        for d in (DEVICE, "cpu")
    }  # fmt: skip
    assert np.allclose(scores[DEVICE], scores["cpu"], atol=1e-3)


@pytest.mark.skipif(DEVICE != "cuda", reason="10^5 rows of logits do not fit a CPU dry run")
def test_canary_exposure_asked_for_more_rows_than_cuda_attention_takes():
    """At 10^5 rows per pass cuDNN's attention refused to run (bf16, an H200): the audit
    caps its rows on a GPU and scores as it does in small passes."""
    from privlm.audit.exposure import candidate_log_likelihoods

    lm = load_public_model("tiny", device=DEVICE, dtype="bfloat16")
    scores = [
        candidate_log_likelihoods(lm.model, lm.tokenizer, 6, max_rows=rows, progress=False)
        for rows in (100_000, 1_000)
    ]
    assert np.allclose(scores[0], scores[1], atol=0.05)


def test_deployments_share_one_copy_on_the_gpu(adapter_dirs):
    from privlm.models.pool import ModelPool

    pool = ModelPool()
    first = EnsembleEngine.from_directories(pool.get("tiny", DEVICE).model, adapter_dirs[:2])
    second = EnsembleEngine.from_directories(pool.get("tiny", DEVICE).model, adapter_dirs[2:])
    assert len(pool) == 1 and first.model is second.model
    alone, _ = engine_on(adapter_dirs[2:], DEVICE, "auto")
    torch.testing.assert_close(second.log_probs(CONTEXT, [0, 1]), alone.log_probs(CONTEXT, [0, 1]))


def test_what_will_not_fit_on_the_gpu_is_refused_before_any_work():
    from privlm.errors import ModelLoadError
    from privlm.models.memory import require_fits

    with pytest.raises(ModelLoadError, match="GiB free"):
        require_fits(1 << 50, torch.device(DEVICE), "a test tensor", "use less")


@pytest.mark.skipif(
    DEVICE == "cuda" and torch.cuda.device_count() < 2, reason="NCCL DP-SGD needs two GPUs"
)
def test_distributed_dpsgd_over_nccl(tmp_path):
    from tests.training.test_distributed_dp import run_torchrun

    out = run_torchrun(tmp_path, device=DEVICE)
    assert out["processes"] == 2 and out["device"].startswith(DEVICE)
