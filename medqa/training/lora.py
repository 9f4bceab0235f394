"""Model pieces of LoRA training: the adapter itself and the loss module the loop trains through.

:class:`SupervisedLM` (built by :func:`_module_class`, so that importing this module does not load torch)
runs the decoder over the batch and applies the LM head only at the N supervised positions —
``(N, H) @ (H, V)`` instead of ``(B, T, H) @ (H, V)``, which is what makes training fast on a
262k-vocabulary model.  :func:`add_lora` resolves ``--target-modules``/``--lora-layers`` against the
model's own layer names and wraps it with a fresh adapter; :func:`_lora_model` loads the base model in the
weight dtype the precision calls for and does that.  Kept apart from loop.py, which only drives these pieces.
"""
from __future__ import annotations

from typing import Sequence

from ..modeling import decoder_and_head
from ..records import MedQAError
from .config import TrainConfig, parse_layers


#: supervised positions per LM-head chunk: with a 262k vocabulary a (512, V) fp32 logits block is 0.5 GB
CE_CHUNK = 512


def _head_ce(head, softcap, h, targets):
    """Per-position cross-entropy of the LM head applied to hidden states ``h`` (N, H) → (N,)."""
    import torch
    import torch.nn.functional as F

    logits = head(h)  # (N, V)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return F.cross_entropy(logits.float(), targets, reduction="none")


def _module_class():
    import torch

    class SupervisedLM(torch.nn.Module):
        """Wraps a (PEFT) causal LM; ``forward`` returns the weighted CE sum at the supervised positions.

        Going through this module's ``forward`` keeps DDP/FSDP hooks in play while we call the decoder
        and the LM head separately.
        """

        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, rows, cols, targets, weights):
            import torch.nn.functional as F

            split = decoder_and_head(self.lm)
            if split is None:  # unknown architecture: full logits, then gather (correct, just slower)
                logits = self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[rows, cols]
                ce = F.cross_entropy(logits.float(), targets, reduction="none")  # (N,)
            else:
                decoder, head, softcap = split
                hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
                h = hidden[rows, cols]  # (N, H): only the supervised positions
                if h.shape[0] > CE_CHUNK:  # long targets (explanations): bounded (chunk, V) logits, recomputed in backward
                    from torch.utils.checkpoint import checkpoint

                    ce = torch.cat([checkpoint(_head_ce, head, softcap, h[s:s + CE_CHUNK], targets[s:s + CE_CHUNK],
                                               use_reentrant=False) for s in range(0, h.shape[0], CE_CHUNK)])
                else:
                    ce = _head_ce(head, softcap, h, targets)  # (N,)
            return (ce * weights).sum(), ce.detach()

    return SupervisedLM


def linear_module_names(model) -> tuple[list[str], list[str]]:
    """Leaf names of the Linear layers inside the decoder blocks, split into (attention, mlp)."""
    import torch

    attn, mlp = [], []
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear) or "lm_head" in name or "embed" in name:
            continue
        leaf, path = name.split(".")[-1], name.lower()
        bucket = attn if ("attn" in path or "attention" in path) else mlp
        if leaf not in bucket:
            bucket.append(leaf)
    return attn, mlp


def resolve_target_modules(model, requested: Sequence[str]) -> list[str]:
    """``all-linear`` / ``attention`` / ``mlp`` / explicit names → the model's own module names."""
    attn, mlp = linear_module_names(model)
    available = attn + mlp
    out: list[str] = []
    for name in requested:
        group = {"all-linear": available, "attention": attn, "mlp": mlp}.get(name)
        if group is None:
            if name not in available:
                raise MedQAError(f"--target-modules: {name!r} is not a Linear layer of this model; "
                                 f"it has {', '.join(available)} (or use all-linear, attention, mlp)")
            group = [name]
        out += [g for g in group if g not in out]
    if not out:
        raise MedQAError(f"--target-modules {','.join(requested)} matched no Linear layer")
    return out


def n_layers(model) -> int:
    cfg = getattr(model, "config", None)
    return int(getattr(cfg, "num_hidden_layers", 0) or getattr(getattr(cfg, "text_config", None), "num_hidden_layers", 0))


def add_lora(model, cfg: TrainConfig):
    """Wrap ``model`` with a fresh LoRA adapter; LoRA weights in fp32 whatever the base dtype."""
    from peft import LoraConfig, get_peft_model

    targets = resolve_target_modules(model, cfg.lora.target_modules)
    try:
        layers = parse_layers(cfg.lora.layers, n_layers(model) or 10**6)
    except ValueError as e:
        raise MedQAError(f"--lora-layers {e}") from None
    lcfg = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout, target_modules=targets,
                      layers_to_transform=layers, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lcfg)
    for p in peft_model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    return peft_model, targets, layers


def count_parameters(model) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total


def _lora_state(acc, wrapper) -> dict:
    """The full (gathered) LoRA weights with the PEFT model's own key names."""
    sd = acc.get_state_dict(wrapper)
    return {k[len("lm."):]: v for k, v in sd.items() if k.startswith("lm.") and "lora_" in k}


def _weights_dtype(cfg: TrainConfig, mixed: str, dist_type: str = "NO") -> str:
    if cfg.model.dtype != "auto":
        return cfg.model.dtype
    if dist_type == "FSDP":  # FSDP flattens frozen + LoRA weights together: one dtype (fp32), autocast computes
        return "fp32"
    return {"bf16": "bf16"}.get(mixed, "fp32")  # fp16 autocast keeps fp32 master weights (Gemma overflows in fp16)


def _lora_model(cfg: TrainConfig, bundle, acc, mixed: str, dist_type: str):
    """(bundle, peft_model, target modules, layers): the base model (``bundle``, else loaded for ``acc``'s
    device) set up for training and wrapped with a fresh LoRA adapter, seeded by --seed."""
    from accelerate.utils import set_seed

    from ..modeling import load_model

    set_seed(cfg.optim.seed)
    if bundle is None:
        device = acc.device.type if acc.device.type in ("cpu", "mps") else str(acc.device)
        bundle = load_model(cfg.model.name, device=device, dtype=_weights_dtype(cfg, mixed, dist_type))
    model = bundle.model
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(model, "config"):
        model.config.use_cache = False
    set_seed(cfg.optim.seed)
    peft_model, targets, layers = add_lora(model, cfg)
    return bundle, peft_model, targets, layers
