"""Tiny random-initialised models and a tiny tokenizer, built offline, for unit tests and demos.

The tokenizer mirrors Gemma's special-token layout (pad=0, eos=1, bos=2) so pad/eos/bos traps show
up in tests exactly as they do with the real model.
"""
from __future__ import annotations

import functools

from .prompts import render_prompt, render_target
from .records import LETTERS, MCQItem

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]


def _corpus() -> list[str]:
    words = ("heart lung kidney liver drug dose artery vein nerve muscle bone blood cell acid enzyme "
             "insulin glucose fever pain infection which following true false except most likely cause "
             "treatment diagnosis patient yes no maybe the of is a in and to with for").split()
    lines = []
    for i in range(200):
        opts = [" ".join(words[(i * 7 + j * 3 + k) % len(words)] for k in range(2)) for j in range(4)]
        item = MCQItem(id=str(i), question=" ".join(words[(i + k) % len(words)] for k in range(6)) + "?",
                       options=opts, answer=i % 4, explanation=" ".join(words[(i * 5 + k) % len(words)] for k in range(8)))
        lines.append(render_prompt(item) + render_target(item))
        lines.append(render_prompt(item, style="lmeval") + " " + LETTERS[i % 5])
    return lines


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(_corpus(), trainer)
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 2)])
    return tk.to_str()


def tiny_tokenizer():
    """A byte-level BPE tokenizer trained in ~0.2 s on template-shaped text (no network)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
                                  pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>")
    tok.padding_side = "right"
    return tok


def tiny_model(tokenizer=None, arch: str = "llama", seed: int = 0, hidden: int = 64, layers: int = 2):
    """A random-initialised causal LM (~100k params) with the tokenizer's vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig

    tokenizer = tokenizer or tiny_tokenizer()
    torch.manual_seed(seed)
    common = dict(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                  max_position_embeddings=1024, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if arch == "gemma3":
        cfg = Gemma3TextConfig(**common, sliding_window=64)
    elif arch == "llama":
        cfg = LlamaConfig(**common, tie_word_embeddings=False)
    else:
        raise ValueError(f"unknown tiny arch {arch!r}")
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.eval()
    return model


def save_tiny(path, arch: str = "llama", seed: int = 0) -> str:
    """Write a tiny model + tokenizer folder loadable by ``--model PATH``."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, arch=arch, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)
