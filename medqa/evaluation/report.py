"""Human-readable outputs of a run: report.md, reliability diagram and per-subject bars (PNG),
the leaderboard-style summary across tasks, and the paired-comparison report.

matplotlib is used with the Agg backend (no display needed); all files are written atomically.
"""
from __future__ import annotations

import io
from pathlib import Path

from ..utils.io import atomic_write_bytes, atomic_write_json, atomic_write_text

RELIABILITY_PNG, SUBJECTS_PNG = "reliability.png", "subjects.png"
# Column order and headers in the spirit of the Open Medical-LLM Leaderboard.
TASK_TITLES = {"medmcqa": "MedMCQA", "medqa": "MedQA (USMLE)", "pubmedqa": "PubMedQA", "mmlu_medical": "MMLU medical"}


def _pct(x) -> str:
    return "–" if x is None or x != x else f"{100 * x:.1f}"


def _num(x, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())


def reliability_diagram(bins: list[dict], path: Path, title: str = "", bins_after: list[dict] | None = None,
                        labels: tuple[str, str] = ("T = 1", "calibrated")) -> None:
    """Accuracy vs confidence per ECE bin (bars), the diagonal, and the bin counts underneath."""
    plt = _pyplot()
    fig, (ax, axn) = plt.subplots(2, 1, figsize=(5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    sets = [(bins, labels[0], "tab:blue")] + ([(bins_after, labels[1], "tab:orange")] if bins_after else [])
    width = (bins[0]["hi"] - bins[0]["lo"]) / len(sets)
    for j, (bs, lab, color) in enumerate(sets):
        xs = [b["lo"] + width * (j + 0.5) for b in bs]
        ax.bar(xs, [b["accuracy"] or 0 for b in bs], width=width * 0.95, color=color, alpha=0.8, label=lab)
        axn.bar(xs, [b["count"] for b in bs], width=width * 0.95, color=color, alpha=0.8)
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    ax.set(ylim=(0, 1), ylabel="accuracy", title=title or "Reliability diagram")
    ax.legend(loc="upper left", fontsize=8)
    axn.set(xlim=(0, 1), xlabel="confidence (max probability)", ylabel="items")
    _save(fig, path)


def subject_bars(per_subject: dict[str, dict], path: Path, title: str = "", overall: float | None = None) -> None:
    """Horizontal accuracy bars per subject (sorted), annotated with n, with the overall accuracy line."""
    plt = _pyplot()
    names = sorted(per_subject, key=lambda s: per_subject[s]["accuracy"])
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(names) + 1.2))
    ax.barh(names, [per_subject[s]["accuracy"] for s in names], color="tab:green", alpha=0.8)
    for y, s in enumerate(names):
        ax.text(0.01, y, f"n={per_subject[s]['n']}", va="center", fontsize=7)
    if overall is not None:
        ax.axvline(overall, color="k", ls="--", lw=1, label=f"overall {_pct(overall)}%")
        ax.legend(fontsize=8, loc="lower right")
    ax.set(xlim=(0, 1), xlabel="accuracy", title=title or "Accuracy by subject")
    _save(fig, path)


def _calibration_lines(m: dict) -> list[str]:
    lines = ["| | NLL | Brier | ECE (15 bins) |", "|---|---|---|---|"]
    if m.get("uncalibrated"):
        u = m["uncalibrated"]
        lines.append(f"| T = 1 | {u['nll']:.4f} | {u['brier']:.4f} | {u['ece']:.4f} |")
        lines.append(f"| T = {m['temperature']:.3f} | {m['nll']:.4f} | {m['brier']:.4f} | {m['ece']:.4f} |")
    else:
        lines.append(f"| T = {m.get('temperature') or 1:.3g} | {m['nll']:.4f} | {m['brier']:.4f} | {m['ece']:.4f} |")
    return lines


def _letter_lines(m: dict) -> list[str]:
    lt = m["letters"]
    head = "| gold \\ pred | " + " | ".join(lt["letters"]) + " |"
    lines = [head, "|---" * (len(lt["letters"]) + 1) + "|"]
    for L, row in zip(lt["letters"], lt["matrix"]):
        lines.append(f"| **{L}** | " + " | ".join(str(x) for x in row) + " |")
    dist = ", ".join(f"{L} {_pct(p)}%" for L, p in lt["pred_distribution"].items())
    gold = ", ".join(f"{L} {_pct(p)}%" for L, p in lt["gold_distribution"].items())
    return lines + ["", f"Predicted letters: {dist}.  Gold letters: {gold}."]


def render_report(m: dict) -> str:
    """report.md for one task run."""
    run = m.get("run", {})
    lines = [f"# Evaluation: {m.get('task') or 'items'}", ""]
    lines += [f"- model: `{run.get('model', run.get('scorer', '?'))}`" + (f" + adapter `{run['adapter']}`" if run.get("adapter") else ""),
              f"- prompt style: `{run.get('style')}`, items: {m['n_items']} ({m['n_labelled']} labelled)"]
    if run.get("source"):
        lines.append(f"- data: `{run['source']}`")
    t = m.get("timing", {})
    if t.get("questions_per_second"):
        lines.append(f"- speed: {t['questions_per_second']:.2f} questions/s ({t['scored_now']} scored in {t['seconds']:.1f} s)")
    if "accuracy" not in m:
        return "\n".join(lines + ["", m.get("note", "")]) + "\n"
    lo, hi = m["accuracy_ci95"]
    lines += ["", "## Accuracy", "",
              f"**{_pct(m['accuracy'])}%** (95% bootstrap CI {_pct(lo)}–{_pct(hi)}), "
              f"macro over subjects {_pct(m['macro_accuracy'])}%, mean confidence {_pct(m['mean_confidence'])}%."]
    if m.get("mean_letter_mass") is not None:
        lines.append(f"Mean next-token probability on the option letters: {_pct(m['mean_letter_mass'])}%.")
    lines += ["", "## Calibration", ""] + _calibration_lines(m) + ["", f"![reliability]({RELIABILITY_PNG})"]
    if m.get("conformal"):
        c = m["conformal"]
        lines += ["", "## Conformal prediction sets", "",
                  f"Target coverage {_pct(c['target_coverage'])}%: empirical coverage **{_pct(c['empirical_coverage'])}%**, "
                  f"mean set size {c['mean_set_size']:.2f}, single-letter sets {_pct(c['singleton_rate'])}% "
                  f"(threshold {c['threshold']:.4f})."]
    lines += ["", "## Answer letters", ""] + _letter_lines(m)
    subj = m["per_subject"]
    if len(subj) > 1:
        lines += ["", "## By subject", "", "| subject | n | accuracy |", "|---|---|---|"]
        lines += [f"| {s} | {v['n']} | {_pct(v['accuracy'])} |" for s, v in subj.items()]
        lines += ["", f"![subjects]({SUBJECTS_PNG})"]
    return "\n".join(lines) + "\n"


def write_report(out: Path, m: dict) -> None:
    """report.md plus the PNG plots into the run folder ``out``."""
    out = Path(out)
    if "accuracy" in m:
        after = m["ece_bins"] if m.get("uncalibrated") else None
        before = m["uncalibrated"]["ece_bins"] if after else m["ece_bins"]
        reliability_diagram(before, out / RELIABILITY_PNG, f"Reliability: {m.get('task') or 'items'}", bins_after=after,
                            labels=("T = 1", f"T = {m.get('temperature') or 1:.2f}"))
        if len(m["per_subject"]) > 1:
            subject_bars(m["per_subject"], out / SUBJECTS_PNG, f"Accuracy by subject: {m.get('task')}", m["accuracy"])
    atomic_write_text(out / "report.md", render_report(m))


def summary_rows(results: dict[str, dict], label: str = "model") -> tuple[list[str], list[str]]:
    """Header and one row: average then each task (and MMLU's subjects, as the leaderboard shows them)."""
    accs = {t: m.get("accuracy") for t, m in results.items()}
    valid = [a for a in accs.values() if a is not None]
    header, row = ["model", "Average"], [label, _pct(sum(valid) / len(valid) if valid else None)]
    for t, m in results.items():
        header.append(TASK_TITLES.get(t, t))
        row.append(_pct(accs[t]))
        if t == "mmlu_medical" and len(m.get("per_subject", {})) > 1:
            for s, v in m["per_subject"].items():
                header.append(f"MMLU {s.replace('_', ' ')}")
                row.append(_pct(v["accuracy"]))
    return header, row


def summary_table(results: dict[str, dict], label: str = "model") -> str:
    """Markdown leaderboard table (accuracy %, the average is over tasks, not items)."""
    header, row = summary_rows(results, label)
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header), "| " + " | ".join(row) + " |"])


def write_summary(out_root: Path, results: dict[str, dict], label: str = "model") -> None:
    lines = ["# Summary", "", summary_table(results, label), "", "| task | n | accuracy (95% CI) | ECE | q/s | data |",
             "|---|---|---|---|---|---|"]
    for t, m in results.items():
        ci = m.get("accuracy_ci95") or [None, None]
        qps = (m.get("timing") or {}).get("questions_per_second")
        lines.append(f"| [{t}]({t}/report.md) | {m['n_items']} | {_pct(m.get('accuracy'))} ({_pct(ci[0])}–{_pct(ci[1])}) "
                     f"| {m.get('ece', float('nan')):.3f} | {_num(qps)} | `{m.get('run', {}).get('source', '')}` |")
    atomic_write_text(Path(out_root) / "summary.md", "\n".join(lines) + "\n")
    atomic_write_json(Path(out_root) / "summary.json", {t: {k: m.get(k) for k in (
        "n_items", "accuracy", "accuracy_ci95", "macro_accuracy", "nll", "brier", "ece", "temperature")}
        for t, m in results.items()})


def comparison_markdown(result: dict, max_ids: int = 30) -> str:
    lines = [f"# Comparison: B = `{result['run_b']}` vs A = `{result['run_a']}`", ""]
    for task, c in result["tasks"].items():
        mc, bs = c["mcnemar"], c["bootstrap"]
        lines += [f"## {task} ({c['n']} paired items)", "",
                  f"- accuracy A {_pct(c['accuracy_a'])}% → B {_pct(c['accuracy_b'])}% "
                  f"(Δ {100 * bs['diff']:+.1f} points, 95% CI {100 * bs['ci95'][0]:+.1f} to {100 * bs['ci95'][1]:+.1f}, "
                  f"paired bootstrap p = {bs['p_value']:.3g})",
                  f"- McNemar: {mc['only_b']} fixed by B, {mc['only_a']} broken by B; exact p = {mc['p_exact']:.3g}, "
                  f"χ² p = {mc['p_chi2']:.3g}"]
        for key, what in (("flipped_to_correct", "wrong → right"), ("flipped_to_wrong", "right → wrong")):
            ids = c[key]
            more = f" … and {len(ids) - max_ids} more (comparison.json)" if len(ids) > max_ids else ""
            lines.append(f"- {what} ({len(ids)}): " + (", ".join(f"`{i}`" for i in ids[:max_ids]) + more if ids else "none"))
        lines.append("")
    return "\n".join(lines)


def write_comparison(out: Path, result: dict) -> None:
    atomic_write_json(Path(out) / "comparison.json", result)
    atomic_write_text(Path(out) / "comparison.md", comparison_markdown(result))
