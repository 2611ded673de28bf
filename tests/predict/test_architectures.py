"""Any Hugging Face causal LM: for each family, a tiny randomly initialised
model built offline from a transformers config. LoRA targets are discovered, the stacked
engine matches PEFT adapter by adapter, and Opacus's per-sample gradients of the LoRA
parameters equal a batch-size-1 loop (what DP-SGD needs)."""

from __future__ import annotations

import pytest
import torch
from opacus import GradSampleModule
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from privlm.predict.engine import EnsembleEngine
from privlm.training.lora_targets import discover_lora_targets

SMALL = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
PROJ = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
FAMILIES = {
    "llama": ({"num_key_value_heads": 2, **SMALL}, PROJ),
    "mistral": ({"num_key_value_heads": 2, **SMALL}, PROJ),
    "qwen2": ({"num_key_value_heads": 2, **SMALL}, PROJ),
    "qwen3": ({"num_key_value_heads": 2, "head_dim": 8, **SMALL}, PROJ),
    "gemma": ({"num_key_value_heads": 2, "head_dim": 8, **SMALL}, PROJ),
    "phi3": ({"num_key_value_heads": 4, **SMALL}, {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}),
    "gpt2": (  # Conv1D projections
        {"vocab_size": 128, "n_embd": 32, "n_layer": 2, "n_head": 4, "bos_token_id": 1, "eos_token_id": 2},
        {"c_attn", "c_proj", "c_fc"},
    ),
    "gpt_neox": (  # fused query_key_value
        {**SMALL, "num_attention_heads": 4},
        {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"},
    ),
}  # fmt: skip
CTX = [3, 5, 7, 11, 13]


def fresh(config, state):
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(state)
    return model.eval()


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    kwargs, expected = FAMILIES[request.param]
    config = AutoConfig.for_model(request.param, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        state = AutoModelForCausalLM.from_config(config).state_dict()
        root = tmp_path_factory.mktemp(request.param)
        targets = discover_lora_targets(fresh(config, state))
        dirs = []
        for i in range(2):
            torch.manual_seed(1 + i)
            lora = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
            get_peft_model(fresh(config, state), lora).save_pretrained(root / f"a{i}")
            dirs.append(root / f"a{i}")
    return request.param, config, state, targets, expected, dirs


def test_lora_targets_are_discovered(family):
    _, _, _, targets, expected, _ = family
    assert set(targets) == expected


def test_the_engine_matches_peft_adapter_by_adapter(family):
    _, config, state, _, _, dirs = family
    engine = EnsembleEngine.from_directories(fresh(config, state), dirs)
    lp = engine.log_probs(CTX, [-1, 0, 1])
    with torch.no_grad():
        public = fresh(config, state)(torch.tensor([CTX])).logits[0, -1].double()
    torch.testing.assert_close(lp[0], torch.log_softmax(public, -1), atol=1e-5, rtol=0)
    for i, path in enumerate(dirs):
        peft = PeftModel.from_pretrained(fresh(config, state), path).eval()
        with torch.no_grad():
            ref = torch.log_softmax(peft(torch.tensor([CTX])).logits[0, -1].double(), -1)
        torch.testing.assert_close(lp[i + 1], ref, atol=1e-5, rtol=0)
    assert not torch.allclose(lp[1], lp[2])


def test_opacus_per_sample_gradients_of_the_lora_parameters(family):
    _, config, state, targets, _, _ = family
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
        model = get_peft_model(fresh(config, state), lora)
    ids = torch.tensor([[3, 5, 7, 9], [4, 6, 8, 10], [12, 14, 16, 18]])

    def loss_of(m, x):
        logits = m(input_ids=x).logits[:, :-1]
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), reduction="sum"
        )

    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    gsm = GradSampleModule(model, loss_reduction="sum")
    loss_of(gsm, ids).backward()
    batched = {n: p.grad_sample.clone() for n, p in params}
    gsm._close()
    for row in range(len(ids)):
        model.zero_grad(set_to_none=True)
        loss_of(model, ids[row : row + 1]).backward()
        for n, p in params:
            torch.testing.assert_close(batched[n][row], p.grad, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "qwen3"])
def test_a_model_directory_of_another_family_trains_and_serves_privately(arch, tmp_path):
    """The same commands on a user's own model directory: DP-SGD, an ensemble, PMixED."""
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.data import Dataset, Record
    from privlm.models import load_tokenizer
    from privlm.predict import PMixED, PMixEDConfig
    from privlm.predict.loading import load_ensemble
    from privlm.training.config import EnsembleConfig, LoraTrainingConfig
    from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
    from privlm.training.ensemble import train_ensemble

    tok = load_tokenizer("tiny")
    kwargs = dict(FAMILIES[arch][0], vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id)  # fmt: skip
    kwargs.pop("pad_token_id", None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(AutoConfig.for_model(arch, **kwargs)).save_pretrained(
            tmp_path / "model"
        )
    tok.save_pretrained(tmp_path / "model")
    model_dir = str(tmp_path / "model")
    data = Dataset([Record(f"note {i} on case {i % 5}", f"record-{i}") for i in range(24)], "mem")
    st = train_dpsgd(
        model_dir, data, tmp_path / "dp",
        DpSgdConfig(target_epsilon=4.0, batch_size=8, physical_batch_size=4, block_size=16),
        progress=False,
    )  # fmt: skip
    assert st.epsilon <= 4.0
    train_ensemble(
        model_dir, data, tmp_path / "ens",
        EnsembleConfig(parts=2, training=LoraTrainingConfig(epochs=1, block_size=16, batch_size=4)),
        progress=False,
    )  # fmt: skip
    lm, engine, _ = load_ensemble(tmp_path / "ens", device="cpu")
    ledger = PrivacyLedger(tmp_path / "l.db", "x", Budget(8.0, 1e-5))
    gen = PMixED(
        engine,
        lm.tokenizer,
        ledger,
        PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=8, sample_rate=1.0),
    ).generate("note", max_new_tokens=3)
    assert ledger.count() == len(gen.token_ids) >= 1


def test_in_context_members_match_their_prompt_decoded_alone(family):
    """The in-context engine encodes the member prompts once and keeps their keys and values;
    every family's cache takes them (gemma's and mistral's attention included)."""
    from privlm.predict.in_context import InContextEngine

    _, config, state, _, _, _ = family
    model = fresh(config, state)
    prompts = [[9, 8, 7, 6], [4]]
    engine = InContextEngine(model, prompts, pad_id=0)
    for _ in range(2):  # the second pass reads the kept prompt states
        lp = engine.log_probs(CTX, [-1, 0, 1])
        with torch.no_grad():
            for row, prompt in zip(lp, [[], *prompts], strict=True):
                alone = model(torch.tensor([prompt + CTX])).logits[0, -1].double()
                torch.testing.assert_close(row, torch.log_softmax(alone, -1), atol=1e-5, rtol=0)
