"""Typed training configuration: five sections, one YAML file, every field also a CLI flag.

Resolution order (later wins): the dataclass defaults (= the ``default`` preset) → ``--preset NAME`` →
``--config FILE`` → individual CLI flags.  Each field is documented exactly once, in its ``metadata``;
the same text is the ``--help`` of its flag and the comment in the YAML files.

Validation happens in each section's ``__post_init__`` and names the CLI flag to fix, so a bad YAML
value and a bad flag produce the same message.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..records import MedQAError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SCHEDULERS = ("cosine", "linear", "constant")
PRESETS = ("default", "seed", "gpu")
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def opt(default: Any, help: str, flag: str | None = None, choices: tuple | None = None, **kw) -> Any:
    """A config field: default, its one-line documentation and (optionally) a non-derived CLI flag."""
    md = {"help": help, "flag": flag, "choices": choices}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=md, **kw)
    return field(default=default, metadata=md, **kw)


def _flag(section: str, f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _fail(section: str, name: str, msg: str) -> None:
    f = next(x for x in fields(SECTIONS[section]) if x.name == name)
    raise MedQAError(f"{_flag(section, f)} ({section}.{name} in YAML) {msg}")


@dataclass
class ModelArgs:
    name: str = opt("embedded", "base model: embedded (Gemma 3 270M), a Hub id, a local folder or a .gguf file",
                    flag="--model")
    device: str = opt("auto", "auto, cpu, cuda[:N], rocm[:N] or mps (under accelerate/torchrun each process uses its "
                              "own local device)")
    dtype: str = opt("auto", "weights of the frozen base: auto (fp32 on CPU; bf16, else fp16, on GPUs), fp32, bf16, "
                             "fp16; LoRA weights are always fp32")
    precision: str = opt("auto", "compute precision: auto (bf16 where supported, fp16 with loss scaling on other "
                                 "GPUs, fp32 on CPU), fp32, bf16 or fp16", choices=PRECISIONS)
    gradient_checkpointing: bool = opt(False, "recompute activations in backward: less memory, ~30%% slower")
    threads: int = opt(0, "CPU threads for torch (0 = torch's default)")

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            _fail("model", "precision", f"must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")
        if self.threads < 0:
            _fail("model", "threads", f"must be >= 0 (got {self.threads})")


@dataclass
class LoraArgs:
    r: int = opt(16, "LoRA rank", flag="--lora-r")
    alpha: float = opt(32.0, "LoRA alpha (the update is scaled by alpha / r)", flag="--lora-alpha")
    dropout: float = opt(0.05, "dropout on the LoRA input", flag="--lora-dropout")
    target_modules: list = opt(["all-linear"], "comma-separated module names (q_proj,v_proj), or all-linear / "
                                               "attention / mlp, resolved for the model's architecture")
    layers: str = opt("", "decoder layers that get LoRA: '' = all, 'top:N' = the last N (backward then stops "
                          "there: faster), or a list/range like '0-5,9'", flag="--lora-layers")

    def __post_init__(self):
        if isinstance(self.target_modules, str):
            self.target_modules = [m.strip() for m in self.target_modules.split(",") if m.strip()]
        if not self.target_modules:
            _fail("lora", "target_modules", "is empty; e.g. --target-modules q_proj,v_proj or all-linear")
        if self.r < 1:
            _fail("lora", "r", f"must be >= 1 (got {self.r})")
        if self.alpha <= 0:
            _fail("lora", "alpha", f"must be > 0 (got {self.alpha})")
        if not 0 <= self.dropout < 1:
            _fail("lora", "dropout", f"must be in [0, 1) (got {self.dropout})")
        try:
            parse_layers(self.layers, 10**6)
        except ValueError as e:
            _fail("lora", "layers", str(e))


@dataclass
class DataArgs:
    task: str = opt("medmcqa", "named task whose *train* split is used (medmcqa = ../shared/data "
                               "medmcqa/train_cardio_subset.jsonl); ignored when --data is given")
    train_file: str = opt("", "training file (.jsonl/.json/.csv/.parquet) or Hub dataset id; overrides --task",
                          flag="--data")
    dataset: str = opt("", "dataset format of --data/--val-data (medmcqa, medqa, pubmedqa, mmlu, generic); "
                           "'' = detect")
    val_file: str = opt("", "validation file for eval-by-accuracy and calibration; '' = carve --val-fraction "
                            "out of the training items", flag="--val-data")
    val_fraction: float = opt(0.1, "share of training items held out for validation when --val-data is not given")
    limit: int = opt(0, "use at most N training items (0 = all), taken after the validation split")
    val_limit: int = opt(0, "use at most N validation items (0 = all)")
    max_length: int = opt(256, "max tokens per example; the explanation is cut first (at a sentence end when "
                               "possible), the answer never")
    with_explanation: bool = opt(False, "also train on the explanation after the answer (when the item has one); off "
                                        "by default: it does not feed the scored letter and costs ~2-3x the compute",
                                 flag="--explanations")
    train_on_prompt: bool = opt(False, "also put loss on the prompt tokens (the seed recipe's full-sequence loss)")
    letter_weight: float = opt(2.0, "loss weight of the answer-letter token (what evaluation scores)")
    answer_weight: float = opt(1.0, "loss weight of the option text after the letter and of EOS")
    explanation_weight: float = opt(0.5, "loss weight of explanation tokens")
    permute_options: float = opt(0.0, "probability that a training item is shown with its options shuffled "
                                      "(new order each epoch; teaches content over letter position, but unlearns "
                                      "the answer-letter prior); 0 = never")
    group_by_length: bool = opt(True, "batch examples of similar length together (seeded, resumable order)")
    dedup_eval: bool = opt(True, "drop training items whose question also appears in the task's eval split")

    def __post_init__(self):
        if self.max_length < 16:
            _fail("data", "max_length", f"must be >= 16 tokens (got {self.max_length})")
        if not 0 <= self.val_fraction < 1:
            _fail("data", "val_fraction", f"must be in [0, 1) (got {self.val_fraction})")
        for name in ("limit", "val_limit"):
            if getattr(self, name) < 0:
                _fail("data", name, f"must be >= 0 (got {getattr(self, name)})")
        for name in ("letter_weight", "answer_weight", "explanation_weight"):
            if getattr(self, name) < 0:
                _fail("data", name, f"must be >= 0 (got {getattr(self, name)})")
        if not 0 <= self.permute_options <= 1:
            _fail("data", "permute_options", f"must be in [0, 1] (got {self.permute_options})")
        if not self.task and not self.train_file:
            _fail("data", "train_file", "is missing: give --data FILE or --task NAME")


@dataclass
class OptimArgs:
    epochs: float = opt(2.0, "passes over the training items (fractions allowed)")
    max_steps: int = opt(0, "stop after N optimizer steps (0 = run --epochs); also sizes the lr schedule")
    batch_size: int = opt(8, "examples per device per forward pass")
    grad_accum: int = opt(2, "forward passes per optimizer step (effective batch = batch × accum × processes)")
    lr: float = opt(1e-3, "peak learning rate")
    scheduler: str = opt("cosine", "learning-rate schedule after warmup", choices=SCHEDULERS)
    warmup_ratio: float = opt(0.05, "share of the steps spent warming up linearly from 0")
    weight_decay: float = opt(0.0, "AdamW weight decay on the LoRA weights")
    max_grad_norm: float = opt(1.0, "clip the gradient norm to this (0 = no clipping)")
    seed: int = opt(0, "seed for the data order, LoRA init and dropout")

    def __post_init__(self):
        if self.epochs <= 0 and self.max_steps <= 0:
            _fail("optim", "epochs", "must be > 0 unless --max-steps is set")
        if self.max_steps < 0:
            _fail("optim", "max_steps", f"must be >= 0 (got {self.max_steps})")
        if self.batch_size < 1:
            _fail("optim", "batch_size", f"must be >= 1 (got {self.batch_size})")
        if self.grad_accum < 1:
            _fail("optim", "grad_accum", f"must be >= 1 (got {self.grad_accum})")
        if not 0 < self.lr < 1:
            _fail("optim", "lr", f"must be in (0, 1) (got {self.lr})")
        if self.scheduler not in SCHEDULERS:
            _fail("optim", "scheduler", f"must be one of {', '.join(SCHEDULERS)} (got {self.scheduler!r})")
        if not 0 <= self.warmup_ratio < 1:
            _fail("optim", "warmup_ratio", f"must be in [0, 1) (got {self.warmup_ratio})")
        if self.max_grad_norm < 0 or self.weight_decay < 0:
            _fail("optim", "max_grad_norm" if self.max_grad_norm < 0 else "weight_decay", "must be >= 0")


@dataclass
class EvalArgs:
    every: int = opt(50, "evaluate validation accuracy every N optimizer steps (0 = at each epoch end, "
                        "-1 = never); the best-accuracy checkpoint becomes the adapter", flag="--eval-every")
    batch_size: int = opt(16, "questions per scoring forward pass", flag="--eval-batch-size")
    patience: int = opt(0, "early stopping: stop after N evaluations without a better accuracy (0 = off)",
                        flag="--early-stopping")
    calibrate: bool = opt(True, "fit a temperature on the validation items and save calibration.json with "
                                "the adapter")
    task: str = opt("", "after training, evaluate base and adapter on this task's eval split (e.g. medmcqa) "
                        "with the evaluation harness and add the table to the model card", flag="--eval-task")
    limit: int = opt(0, "with --eval-task: evaluate the first N items only (0 = all)", flag="--eval-limit")

    def __post_init__(self):
        if self.every < -1:
            _fail("eval", "every", f"must be >= -1 (got {self.every})")
        if self.batch_size < 1 or self.patience < 0 or self.limit < 0:
            _fail("eval", "batch_size" if self.batch_size < 1 else "patience" if self.patience < 0 else "limit",
                  "is out of range")


@dataclass
class RunArgs:
    out: str = opt("", "run folder (default runs/train-<time>); --resume continues the one given here")
    resume: bool = opt(False, "continue from the last checkpoint in --out (same data order, step and RNG)")
    save_every: int = opt(50, "write a checkpoint every N optimizer steps (0 = only at the end/on Ctrl-C)")
    keep_checkpoints: int = opt(2, "how many step checkpoints to keep (the best adapter is kept separately)")
    log_every: int = opt(1, "log train loss every N optimizer steps")
    progress: bool = opt(True, "show a progress bar")
    push_to_hub: str = opt("", "after training, upload the adapter folder to this Hub repo (owner/name)")

    def __post_init__(self):
        if self.save_every < 0 or self.keep_checkpoints < 1 or self.log_every < 1:
            name = "save_every" if self.save_every < 0 else "keep_checkpoints" if self.keep_checkpoints < 1 else "log_every"
            _fail("run", name, "is out of range (save_every >= 0, keep_checkpoints >= 1, log_every >= 1)")


SECTIONS: dict[str, type] = {"model": ModelArgs, "lora": LoraArgs, "data": DataArgs, "optim": OptimArgs,
                             "eval": EvalArgs, "run": RunArgs}


@dataclass
class TrainConfig:
    preset: str = "default"
    model: ModelArgs = field(default_factory=ModelArgs)
    lora: LoraArgs = field(default_factory=LoraArgs)
    data: DataArgs = field(default_factory=DataArgs)
    optim: OptimArgs = field(default_factory=OptimArgs)
    eval: EvalArgs = field(default_factory=EvalArgs)
    run: RunArgs = field(default_factory=RunArgs)

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise MedQAError(f"--preset must be one of {', '.join(PRESETS)} (got {self.preset!r})")

    # ------------------------------------------------------------------ dict / YAML
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "config") -> "TrainConfig":
        unknown = set(d) - {"preset", *SECTIONS}
        if unknown:
            raise MedQAError(f"{where}: unknown section(s) {', '.join(sorted(unknown))}; "
                             f"expected {', '.join(SECTIONS)}")
        kw: dict[str, Any] = {"preset": d.get("preset", "default")}
        for name, klass in SECTIONS.items():
            sec = d.get(name) or {}
            if not isinstance(sec, dict):
                raise MedQAError(f"{where}: section {name!r} must be a mapping")
            known = {f.name: f for f in fields(klass)}
            bad = set(sec) - set(known)
            if bad:
                raise MedQAError(f"{where}: unknown key(s) {', '.join(f'{name}.{k}' for k in sorted(bad))}; "
                                 f"{name} has {', '.join(known)}")
            kw[name] = klass(**{k: _coerce(known[k], v, f"{name}.{k}", where) for k, v in sec.items()})
        return cls(**kw)

    def to_yaml(self, path: str | Path | None = None, command: str | None = None) -> str:
        """YAML text with one comment per field; ``command`` goes into the header (the exact command line)."""
        lines = [f"# medqa training config (preset: {self.preset})"]
        if command:
            lines.append(f"# command: {command}")
        lines.append(f"preset: {self.preset}")
        for name, klass in SECTIONS.items():
            sec = getattr(self, name)
            lines.append(f"{name}:")
            for f in fields(klass):
                lines.append(f"  # {_flag(name, f)}: {f.metadata['help'].replace('%%', '%')}")
                lines.append(f"  {f.name}: {_yaml_scalar(getattr(sec, f.name))}")
        text = "\n".join(lines) + "\n"
        if path is not None:
            from ..utils.io import atomic_write_text

            atomic_write_text(path, text)
        return text

    @classmethod
    def from_yaml(cls, path: str | Path) -> "TrainConfig":
        import yaml

        p = Path(path).expanduser()
        if not p.is_file():
            raise MedQAError(f"--config {path}: file not found")
        try:
            d = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise MedQAError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from e
        if not isinstance(d, dict):
            raise MedQAError(f"--config {path}: expected a mapping of sections")
        return cls.from_dict(d, where=str(path))


def _coerce(f: dataclasses.Field, value: Any, key: str, where: str) -> Any:
    typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    try:
        if typ == "bool":
            if isinstance(value, str):
                if value.lower() in ("true", "yes", "1", "on"):
                    return True
                if value.lower() in ("false", "no", "0", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if typ == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value or 0)
        if typ == "float":
            return float(value)
        if typ == "list":
            return [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) else list(value)
        return "" if value is None else str(value)
    except (TypeError, ValueError):
        raise MedQAError(f"{where}: {key} must be a {typ} (got {value!r})") from None


def _yaml_scalar(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(json.dumps(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


# ---------------------------------------------------------------------- presets

#: Overrides on top of the dataclass defaults.  ``seed`` is the published recipe exactly; ``default`` is
#: what worked best here (see benchmarks/RESULTS.md).  configs/<name>.yaml are these, written by to_yaml.
PRESET_OVERRIDES: dict[str, dict] = {
    "seed": {
        "model": {"gradient_checkpointing": True},
        "lora": {"r": 8, "alpha": 16.0, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"], "layers": ""},
        "data": {"max_length": 256, "with_explanation": True, "train_on_prompt": True, "group_by_length": False, "letter_weight": 1.0,
                 "answer_weight": 1.0, "explanation_weight": 1.0},
        "optim": {"lr": 2e-4, "scheduler": "cosine", "warmup_ratio": 0.05, "epochs": 2.0, "batch_size": 4,
                  "grad_accum": 4},
        "eval": {"every": 0},
    },
    "default": {},
    # default's recipe with its effective batch (16) in one forward pass: on a GPU each forward/backward is
    # bound by kernel launches, not FLOPs, so fewer, larger passes win (H200, bf16, random-weight Gemma 3 270M:
    # 46.7 ex/s vs the seed's 14.7; benchmarks/RESULTS.md).  On a 2-core CPU batch 8 x 2 is as fast and uses
    # less memory.
    "gpu": {"optim": {"batch_size": 16, "grad_accum": 1}},
}


def preset_config(name: str) -> TrainConfig:
    if name not in PRESET_OVERRIDES:
        raise MedQAError(f"--preset must be one of {', '.join(PRESETS)} (got {name!r})")
    base = TrainConfig().to_dict()
    for sec, kv in PRESET_OVERRIDES[name].items():
        base[sec].update(kv)
    base["preset"] = name
    return TrainConfig.from_dict(base, where=f"preset {name}")


def merge(cfg: TrainConfig, overrides: dict[str, dict]) -> TrainConfig:
    d = cfg.to_dict()
    for sec, kv in overrides.items():
        d[sec].update(kv)
    return TrainConfig.from_dict(d, where="command line")


# ---------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field (default SUPPRESS, so only flags the user typed override the file)."""
    parser.add_argument("--config", metavar="FILE", help="YAML config (e.g. configs/default.yaml)")
    parser.add_argument("--preset", choices=PRESETS, default=argparse.SUPPRESS,
                        help="start from a preset: default (what works best here), seed (the published recipe) or gpu "
                             "(default with its effective batch in one forward pass: faster on GPUs)")
    for name, klass in SECTIONS.items():
        group = parser.add_argument_group(f"{name} ({name}: in YAML)")
        for f in fields(klass):
            flag, typ = _flag(name, f), (f.type if isinstance(f.type, str) else f.type.__name__)
            kw: dict[str, Any] = {"dest": f"{name}__{f.name}", "default": argparse.SUPPRESS,
                                  "help": f"{f.metadata['help']} [default: {_default_text(f)}]"}
            if typ == "bool":
                group.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
                continue
            if f.metadata.get("choices"):
                kw["choices"] = f.metadata["choices"]
            kw["type"] = {"int": int, "float": float}.get(typ, str)
            kw["metavar"] = {"int": "N", "float": "X"}.get(typ, "TEXT" if not kw.get("choices") else None)
            if kw["metavar"] is None:
                del kw["metavar"]
            group.add_argument(flag, **kw)


def _default_text(f: dataclasses.Field) -> str:
    v = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
    return ",".join(v) if isinstance(v, list) else repr(v).replace("%", "%%")


def from_args(args: argparse.Namespace) -> TrainConfig:
    """defaults → --preset → --config → flags.  A --config file's own ``preset:`` is used when no --preset."""
    file_cfg = TrainConfig.from_yaml(args.config) if getattr(args, "config", None) else None
    preset = getattr(args, "preset", None)
    if file_cfg is not None and preset is None:
        cfg = file_cfg
    else:
        cfg = preset_config(preset or "default")
        if file_cfg is not None:  # the file's values that differ from its own preset override --preset
            base = preset_config(file_cfg.preset if file_cfg.preset in PRESETS else "default").to_dict()
            fd = file_cfg.to_dict()
            diff = {s: {k: v for k, v in fd[s].items() if base[s][k] != v} for s in SECTIONS}
            cfg = merge(cfg, diff)
    overrides: dict[str, dict] = {}
    for key, value in vars(args).items():
        if "__" in key and key.split("__")[0] in SECTIONS:
            sec, name = key.split("__", 1)
            overrides.setdefault(sec, {})[name] = value
    return merge(cfg, overrides) if overrides else cfg


def command_line(argv: list[str] | None = None) -> str:
    return "medqa " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


def parse_layers(spec: str, n_layers: int) -> list[int] | None:
    """'' → None (all); 'top:N' → the last N; '0-3,7' → [0,1,2,3,7]."""
    spec = (spec or "").strip()
    if not spec:
        return None
    if spec.startswith("top:"):
        try:
            k = int(spec[4:])
        except ValueError:
            raise ValueError(f"'{spec}' is not top:N") from None
        if k < 1:
            raise ValueError(f"'{spec}': N must be >= 1")
        return list(range(max(0, n_layers - k), n_layers))
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"'{spec}' is not a layer list like '0-5,9' or top:N") from None
    bad = [i for i in out if i < 0 or i >= n_layers]
    if bad:
        raise ValueError(f"layer(s) {bad} out of range for a model with {n_layers} layers")
    return sorted(out)
