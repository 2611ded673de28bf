"""The settings of privlm's training jobs, one definition each (``privlm.config``).

These classes import no torch, so ``privlm train … --help`` and the service's request models
read them without loading a model library. The training code is in ``lora_finetune``
(LoRA, PMixED Table 2), ``ensemble`` (PMixED/SubMix ensembles), ``dpsgd`` (DP-SGD, Abadi
et al. 2016) and ``jft`` (Just Fine-tune Twice, Shi et al. 2022).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from privlm.config import (
    CHECKPOINTING_HELP,
    DEVICE_HELP,
    DTYPE_HELP,
    SECURE_MODE_HELP,
    SEED_HELP,
    check_settings,
    setting,
)
from privlm.errors import PrivlmError

PROTOCOLS = ("pmixed", "submix")
MEMBER_KINDS = ("lora", "in-context")
USER_REDUCTIONS = ("mean", "sum")
GRAD_SAMPLE_MODES = ("hooks", "ghost")
USER_SAMPLING = ("joint", "one-per-user")
PHASE1_MODES = ("direct", "screened", "light-noise")
# how DP-SGD's σ is chosen, as Opacus's two entry points (make_private_with_epsilon,
# make_private); "none" is the non-private baseline, asked for by name (PromptDPSGD only)
NOISE_CHOICES = ("target-epsilon", "noise-multiplier", "none")


@dataclass(kw_only=True)
class LoraTrainingConfig:
    rank: int = setting(4, "LoRA rank r (Table 2)", ge=1, le=1024)
    alpha: float = setting(32.0, "LoRA α (Table 2)", gt=0)
    targets: list[str] | None = None  # None: discovered from the model
    epochs: int = setting(3, "Epochs per adapter", ge=1, le=1000)
    learning_rate: float = setting(2e-4, "AdamW learning rate (Table 2)", gt=0, le=1)
    weight_decay: float = 0.01
    block_size: int = setting(256, "Tokens per training block", ge=8, le=32768)
    batch_size: int = setting(8, "Blocks per step", ge=1, le=4096)
    max_blocks: int | None = setting(None, "Cap on blocks per adapter (quick runs)", ge=1)
    pack: bool = True  # False: every record is its own sequence (padded), not packed in blocks
    seed: int = 0
    # the base model's placement (privlm.models.placement); LoRA weights stay float32
    device: str = "auto"
    dtype: str = "auto"
    # recompute activations in the backward pass (privlm.training.checkpointing): less memory
    gradient_checkpointing: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_settings(self)  # the declared bounds and choices first, naming the setting

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class EnsembleConfig:
    """An ensemble's shape and each adapter's training (a :class:`LoraTrainingConfig`)."""

    parts: int = setting(8, "N (PMixED) or k (SubMix) disjoint parts", ge=1, le=65536)
    protocol: str = setting(
        "pmixed", "pmixed: one member per part; submix: two per part", choices=PROTOCOLS
    )
    members: str = setting(
        "lora",
        "lora: a LoRA adapter fine-tuned on each part; in-context: the public model prompted "
        "with each part's records (no training; hundreds to thousands of members)",
        choices=MEMBER_KINDS,
    )
    prompt_tokens: int = setting(
        256, "in-context members: the first tokens of each part's records kept as its prompt",
        ge=1, le=32768,
    )  # fmt: skip
    training: LoraTrainingConfig = field(default_factory=LoraTrainingConfig)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(kw_only=True)
class DpSgdPrivacy:
    """DP-SGD's privacy settings (Abadi et al. 2016), declared once and shared by every
    DP-SGD job: LoRA adapters (:class:`DpSgdConfig`, JFT's phases) and prompts
    (``privlm.prompting.config.PromptDpSgdConfig``). A job that needs other defaults
    restates only the default (``privlm.config.with_default``); help and bounds stay here."""

    noise: str = setting(
        "target-epsilon",
        "How σ is chosen: target-epsilon (calibrated so the run meets the target ε), "
        "noise-multiplier (the fixed σ given), or none (the non-private baseline, where a "
        "job offers one)",
        choices=NOISE_CHOICES,
    )
    target_epsilon: float = setting(
        3.0, "Target ε (noise target-epsilon: σ is calibrated to meet it)", gt=0, le=1000
    )
    delta: float | None = setting(
        None, "δ (default min(1/n^1.1, 1e-6), n privacy units)", gt=0, lt=1
    )
    noise_multiplier: float | None = setting(None, "The fixed σ of noise noise-multiplier", gt=0)
    max_grad_norm: float = setting(1.0, "Per-example clipping norm", gt=0)
    batch_size: int = setting(
        64, "Expected logical (Poisson) batch size: q = batch size / n", ge=1, le=65536
    )
    physical_batch_size: int = setting(8, "Examples per forward pass (memory)", ge=1, le=4096)
    epochs: int = setting(1, "Epochs", ge=1, le=1000)
    learning_rate: float = setting(4e-4, "AdamW learning rate", gt=0, le=1)
    accountant: str = setting("rdp", "The accountant", choices=("rdp", "prv"))
    # None (the default): noise, batches and initialisation from fresh OS entropy. A seed makes
    # the run reproducible, and its guarantee void against anyone who knows the seed.
    seed: int | None = setting(None, SEED_HELP)
    # every noise coordinate and Poisson coin straight from os.urandom (privlm's secure mode,
    # no torchcsprng needed; privlm.training.secure_noise); cannot be seeded
    secure_mode: bool = setting(False, SECURE_MODE_HELP)
    # where the base model runs (privlm.models.placement): auto is CUDA in bfloat16 when a GPU
    # is there, else the CPU in float32; the trained parameters, their gradients and the
    # noise are float32 either way
    device: str = setting("auto", DEVICE_HELP)
    dtype: str = setting("auto", DTYPE_HELP)

    def __post_init__(self) -> None:
        check_settings(self)  # the declared bounds and choices first, naming the setting
        fixed = self.noise == "noise-multiplier"
        if fixed and self.noise_multiplier is None:
            raise PrivlmError("noise noise-multiplier needs the σ: give noise_multiplier")
        if not fixed and self.noise_multiplier is not None:
            raise PrivlmError(
                f"a noise multiplier σ is given but noise is {self.noise!r}: choose "
                "noise='noise-multiplier' to train at that σ (or drop it)"
            )
        if self.noise == "none" and self.secure_mode:
            raise PrivlmError("secure mode is for private training; noise 'none' adds no noise")
        if self.secure_mode and self.seed is not None:
            raise PrivlmError(
                "secure mode draws every noise coordinate and batch from the OS CSPRNG, so it "
                "cannot be seeded; drop the seed or the secure mode"
            )


@dataclass(kw_only=True)
class DpSgdConfig(DpSgdPrivacy):
    """Defaults: Table 2 of PMixED for DP-SGD (lr 4e-4, clip 1.0, rank 4, α 32), scaled."""

    rank: int = setting(4, "LoRA rank r (Table 2)", ge=1, le=1024)
    alpha: float = setting(32.0, "LoRA α (Table 2)", gt=0)
    targets: list[str] | None = None
    block_size: int = setting(128, "Tokens per example (longer are cut)", ge=8, le=32768)
    grad_sample_mode: str = setting(
        "hooks",
        "Per-sample gradients: hooks (materialised) or ghost (Opacus's ghost clipping: "
        "per-sample norms only, clipped in a second backward pass; less memory)",
        choices=GRAD_SAMPLE_MODES,
    )
    user_sampling: str = setting(
        "joint",
        "User-level data: joint (each user's records joined, clipped jointly) or one-per-user "
        "(one random record of each sampled user per step)",
        choices=USER_SAMPLING,
    )
    max_blocks_per_user: int | None = setting(
        None, "joint only: at most this many blocks of each user (default: all)", ge=1
    )
    user_reduction: str = setting(
        "mean",
        "joint only: a user's gradient is the mean, or the sum, of their blocks' gradients",
        choices=USER_REDUCTIONS,
    )
    # recompute each layer's activations in the backward pass (reentrant checkpointing, the
    # form Opacus's per-sample gradients stay exact under): less memory, more compute
    gradient_checkpointing: bool = setting(False, CHECKPOINTING_HELP)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.noise == "none":
            raise PrivlmError(
                "DP-SGD's noise cannot be 'none': a non-private LoRA fine-tune is "
                "privlm train lora (privlm.training.lora_finetune)"
            )


@dataclass(kw_only=True)
class JftConfig:
    """Just Fine-tune Twice's settings. Phase 1 is built from ``phase1_epochs`` and
    ``phase1_learning_rate`` (and ``phase1_epsilon`` in light-noise mode) unless
    ``phase1_training``/``phase1_dpsgd`` are given whole; phase 2 is a DP-SGD config."""

    detector: str = setting(
        "pii",
        "Secret detector: pii (regex + privlm's recognisers + Presidio + the learned name, "
        "address and place tagger, for recall), pii-fast (pii without the tagger, several "
        "times faster), regex, low-entity, high-entity, low-contextual, high-contextual, "
        "presidio, pii-patterns, tagger, or a union such as regex+low-entity",
    )
    phase1: str = setting("direct", "Phase-1 mode", choices=PHASE1_MODES)
    phase1_epochs: int = setting(1, "Phase-1 epochs (the redacted fine-tune)", ge=1, le=1000)
    phase1_learning_rate: float = setting(2e-4, "Phase-1 learning rate", gt=0, le=1)
    phase1_epsilon: float = setting(
        3.0, "light noise: target ε for missed secrets, at rate q·m̃_hi", gt=0, le=1000
    )
    patterns_file: Path | None = None  # the user's rules (privlm.detect.rules)
    screened_file: Path | None = None  # screened mode: the sanitised file
    annotated_file: Path | None = None  # light noise: the annotated sample
    miss_rate_groups: int = 10
    # strings the detector is made to miss, to audit a missed secret (§6.4)
    deliberately_missed: list[str] = field(default_factory=list)
    phase1_training: LoraTrainingConfig | None = None
    phase1_dpsgd: DpSgdConfig | None = None
    phase2: DpSgdConfig = field(default_factory=DpSgdConfig)

    def phase1_lora(self) -> LoraTrainingConfig:
        """Phase 1's (non-private) fine-tune on the redacted data: the one builder of its
        settings (the CLI, the service and the library all come here). Its own epochs and
        learning rate; the adapter's shape, block size, placement and memory settings are
        phase 2's, so phase 2 continues the same adapter; one record per sequence, unpacked,
        as JFT's masked loss needs."""
        if self.phase1_training is not None:
            return self.phase1_training
        p2 = self.phase2
        return LoraTrainingConfig(
            rank=p2.rank, alpha=p2.alpha, targets=p2.targets, epochs=self.phase1_epochs,
            learning_rate=self.phase1_learning_rate, block_size=p2.block_size,
            batch_size=p2.physical_batch_size, pack=False,
            seed=0 if p2.seed is None else p2.seed,  # phase 1's shuffle: no noise, no guarantee
            device=p2.device, dtype=p2.dtype, gradient_checkpointing=p2.gradient_checkpointing,
        )  # fmt: skip

    def phase1_dp(self) -> DpSgdConfig:
        """Light-noise phase 1: DP-SGD at ``phase1_epsilon`` (for the missed secrets)."""
        if self.phase1_dpsgd is not None:
            return self.phase1_dpsgd
        return replace(
            self.phase2, noise="target-epsilon", target_epsilon=self.phase1_epsilon,
            noise_multiplier=None,
            epochs=self.phase1_epochs, learning_rate=self.phase1_learning_rate,
        )  # fmt: skip

    def __post_init__(self) -> None:
        check_settings(self)  # the declared bounds and choices first, naming the setting
        if self.phase1 == "screened" and self.screened_file is None:
            raise PrivlmError("the screened mode needs the sanitised file (--screened FILE)")
        if self.phase1 == "light-noise" and self.annotated_file is None:
            raise PrivlmError(
                "the light-noise mode needs an annotated sample to estimate the detector's "
                "miss rate (--annotated FILE)"
            )
