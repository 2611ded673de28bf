"""Private fine-tuning: DP-SGD on LoRA adapters (record- and user-level), Just Fine-tune
Twice, and the LoRA ensembles of PMixED and SubMix. The functions the CLI calls; ``model``
is a name or a :class:`~privlm.models.LoadedModel` (trained on a copy, left unchanged):

- ``train_dpsgd(model, dataset, out_dir, DpSgdConfig(...), ledger=...)``
- ``train_jft(model, dataset, out_dir, JftConfig(...), ledger=...)``
- ``train_ensemble(model, dataset, out_dir, EnsembleConfig(parts=parts, protocol=protocol, training=training))``

Each follows the one path of ``privlm.accounting.budgeted``: plan, check, run, charge,
release.
"""

from privlm.lazy import lazy_exports

EXPORTS = {
    "DpSgdConfig": "dpsgd",
    "PrivacyStatement": "dpsgd",
    "train_dpsgd": "dpsgd",
    "JftConfig": "jft",
    "SdpStatement": "jft",
    "train_jft": "jft",
    "LoraTrainingConfig": "lora_finetune",
    "finetune_lora": "lora_finetune",
    "train_ensemble": "ensemble",
    "EnsembleConfig": "config",
    "DpSgdPrivacy": "config",
    "EnsembleManifest": "manifest",
    "load_manifest": "manifest",
    "model_card": "model_card",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
