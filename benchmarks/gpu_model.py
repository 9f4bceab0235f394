"""Write a random-initialised copy of the embedded model (Gemma 3 270M architecture and tokenizer) to a folder.

    python benchmarks/gpu_model.py SRC OUT

SRC holds the embedded model's config.json, generation_config.json, tokenizer_config.json and tokenizer.json
(or tokenizer.json.gz).  Used by gpu_check.sh on a lent GPU machine: the real weights (a 250 MB GGUF) do not
fit the 64 MiB that travels there, and throughput depends only on the architecture and shapes, not on the
weight values.  Accuracy measured on such a copy is meaningless, and the tables say so.
"""
from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path


def main(src: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json"):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
        elif (src / f"{name}.gz").exists():
            with gzip.open(src / f"{name}.gz", "rb") as f, open(out / name, "wb") as g:
                shutil.copyfileobj(f, g)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), dtype=torch.float32)
    model.save_pretrained(out)
    (out / "RANDOM_WEIGHTS.txt").write_text("random-initialised (seed 0): for throughput checks only\n")
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, random weights")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
