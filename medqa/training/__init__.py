"""LoRA fine-tuning: config (config.py), training items (data.py), data → tokens (tokenize.py), the one loop
(loop.py) with its model pieces (lora.py) and post-training steps (finish.py), checkpoints, run metadata, plots,
model card and export.  Importing this package is cheap (torch loads lazily)."""
from .config import TrainConfig, preset_config

__all__ = ["TrainConfig", "preset_config"]
