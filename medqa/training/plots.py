"""Loss curve PNG from a run's metrics records (train loss per step, validation accuracy per evaluation)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def _ema(xs: Sequence[float], alpha: float = 0.1) -> list[float]:
    out, m = [], None
    for x in xs:
        m = x if m is None else alpha * x + (1 - alpha) * m
        out.append(m)
    return out


def loss_curve(records: Sequence[dict], path: str | Path, title: str = "") -> Path | None:
    """Two panels: train loss (raw + smoothed) and learning rate; validation accuracy on a twin axis."""
    train = [r for r in records if r.get("type") == "train" and r.get("loss") is not None]
    evals = [r for r in records if r.get("type") == "eval"]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_lr) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    if train:
        steps = [r["step"] for r in train]
        loss = [r["loss"] for r in train]
        ax.plot(steps, loss, color="tab:blue", alpha=0.3, lw=1, label="train loss")
        ax.plot(steps, _ema(loss), color="tab:blue", lw=2, label="train loss (EMA)")
        ax_lr.plot(steps, [r.get("lr", 0.0) for r in train], color="tab:gray")
    ax.set_ylabel("loss (weighted CE, supervised tokens)")
    ax_lr.set_ylabel("lr")
    ax_lr.set_xlabel("optimizer step")
    if evals:
        ax2 = ax.twinx()
        ax2.plot([r["step"] for r in evals], [100 * r["val_accuracy"] for r in evals], "o-", color="tab:green",
                 label="val accuracy")
        best = [r for r in evals if r.get("is_best")]
        if best:
            ax2.plot([best[-1]["step"]], [100 * best[-1]["val_accuracy"]], "*", ms=14, color="tab:red", label="best")
        ax2.set_ylabel("validation accuracy (%)")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="best", fontsize=8, framealpha=0.7)
    else:
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "LoRA training")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path
