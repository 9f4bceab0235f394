"""The Gradio demo: question and options in; answer, a probability bar per option, confidence/abstention,
explanation and (with RAG) the retrieved evidence out.

``build_ui(engine)`` returns the Blocks; ``mount_ui(app, engine, settings)`` mounts it at ``/ui`` on the
API server (``medqa serve --ui``); ``medqa ui`` launches it on its own.  With API keys configured the
UI asks for a login whose password is an API key (browsers cannot send Bearer headers).
The sample questions below are written for this demo (not taken from any dataset).
"""
from __future__ import annotations

import html
import os
from typing import Any

from ..records import LETTERS, MedQAError

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phone-home from a clinical demo

UI_PATH = "/ui"

# question, option A..E ("" = unused)
SAMPLES: list[list[str]] = [
    ["A 24-year-old woman has fatigue and heavy menstrual periods. Hemoglobin is 9.8 g/dL with a low mean "
     "corpuscular volume. Which laboratory test best confirms iron deficiency?",
     "Serum ferritin", "Hemoglobin electrophoresis", "Serum vitamin B12", "Direct Coombs test", ""],
    ["A 58-year-old man has 40 minutes of crushing chest pain. The ECG shows ST-segment elevation in leads II, "
     "III and aVF. Which coronary artery is most likely occluded?",
     "Left anterior descending artery", "Right coronary artery", "Left main coronary artery", "Left circumflex artery", ""],
    ["Deficiency of which vitamin causes scurvy, with bleeding gums and poor wound healing?",
     "Vitamin A", "Vitamin B1", "Vitamin C", "Vitamin D", "Vitamin K"],
    ["A 3-year-old child has a barking cough, hoarse voice and inspiratory stridor two days after a mild cold. "
     "What is the most likely diagnosis?",
     "Acute epiglottitis", "Croup (laryngotracheobronchitis)", "Foreign body aspiration", "Bronchiolitis", ""],
    ["A man develops hives, wheeze and hypotension minutes after a bee sting. What is the first-line treatment?",
     "Oral cetirizine", "Intravenous hydrocortisone", "Intramuscular epinephrine", "Nebulised salbutamol", ""],
]
SAMPLE_LABELS = ["Iron deficiency", "Inferior STEMI", "Scurvy", "Barking cough", "Anaphylaxis"]

CSS = """
#medqa-answer {font-size: 1.15rem}
.medqa-abstain {color: #b45309; font-weight: 600}
.medqa-ok {color: #047857; font-weight: 600}
"""


def _format(result: Any) -> tuple[str, dict[str, float], str, str, str]:
    """UI outputs for one AnswerResult; an abstention is never presented as the answer (docs/answer_schema.md)."""
    from ..formatting import headline

    lines = [html.escape(x) for x in headline(result)]
    if result.abstained:
        answer_md = f"### No confident answer\n{lines[0].removeprefix('No confident answer: ')}<br>{lines[1]}"
    else:
        answer_md = f"### {lines[0]}"
    probs = {f"{L}) {opt}": float(result.probabilities.get(L, 0.0)) for L, opt in zip(LETTERS, result.options)}
    cal = f"temperature {result.temperature:.2f}, " + ("calibrated" if result.calibrated else "uncalibrated")
    if result.abstained:
        verdict = f'<span class="medqa-abstain">Abstained</span>: best guess {result.answer_letter} ({result.confidence:.0%})'
    else:
        verdict = f'<span class="medqa-ok">Answered</span> with {result.confidence_label} confidence ({result.confidence:.0%})'
    conf_md = (f"{verdict}; {cal}. Plausible: {', '.join(result.plausible)}."
               f"<br><small>{html.escape(result.disclaimer)}</small>")
    if result.explanation:
        head = (f"_Tentative: explains the top option {result.answer_letter}, not a confident answer._\n\n"
                if result.abstained else "")
        expl_md = head + html.escape(result.explanation)
        if result.citations:
            expl_md += "\n\nCited: " + ", ".join(f"[{html.escape(c)}]" for c in result.citations)
    else:
        expl_md = "_No explanation requested._"
    if result.evidence:
        ev_md = "\n".join(f"- **[{html.escape(p.id)}]** {html.escape(p.text[:400])}"
                          + (f" _({html.escape(p.source)})_" if p.source else "") for p in result.evidence)
    else:
        ev_md = "_No retrieved evidence (start the server with --rag INDEX)._"
    return answer_md, probs, conf_md, expl_md, ev_md


def build_ui(engine: Any, title: str = "medqa — clinical multiple-choice QA"):
    import gradio as gr

    has_rag = getattr(engine, "retriever", None) is not None
    can_explain = bool(getattr(engine, "info", lambda: {"can_generate": True})().get("can_generate", True))

    def answer(question: str, a: str, b: str, c: str, d: str, e: str, explain: bool, use_rag: bool):
        options = [o.strip() for o in (a, b, c, d, e)]
        while options and not options[-1]:
            options.pop()
        if any(not o for o in options):
            raise gr.Error("fill the options in order (A, B, ...) without gaps")
        try:
            result = engine.answer(question or "", options or None, explain=bool(explain and can_explain),
                                   rag_k=None if (use_rag and has_rag) else 0)
        except MedQAError as err:
            raise gr.Error(str(err)) from err
        return _format(result)

    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        gr.Markdown(f"# {title}\nEnter a question and 2–5 options. The answer is the option the model scores "
                    "highest; the bars show its probability for every option. **Not medical advice.**")
        with gr.Row():
            with gr.Column(scale=1):
                question = gr.Textbox(label="Question", lines=5, elem_id="medqa-question",
                                      placeholder="A 45-year-old presents with ...")
                opts = [gr.Textbox(label=f"Option {L}", lines=1, elem_id=f"medqa-option-{L}") for L in LETTERS]
                with gr.Row():
                    explain = gr.Checkbox(label="Explain (slower)", value=can_explain, interactive=can_explain,
                                          elem_id="medqa-explain")
                    use_rag = gr.Checkbox(label="Use retrieved evidence", value=has_rag, visible=has_rag,
                                          elem_id="medqa-rag")
                submit = gr.Button("Answer", variant="primary", elem_id="medqa-submit")
            with gr.Column(scale=1):
                answer_md = gr.Markdown(elem_id="medqa-answer", value="")
                probs = gr.Label(label="Probability per option", num_top_classes=len(LETTERS), elem_id="medqa-probs",
                                 show_heading=False)
                confidence = gr.Markdown(elem_id="medqa-confidence")
                with gr.Accordion("Explanation", open=True):
                    explanation = gr.Markdown(elem_id="medqa-explanation")
                with gr.Accordion("Evidence", open=has_rag, visible=has_rag):
                    evidence = gr.Markdown(elem_id="medqa-evidence")
        gr.Examples(examples=SAMPLES, inputs=[question, *opts], label="Examples (click one)",
                    example_labels=SAMPLE_LABELS, elem_id="medqa-examples")
        inputs = [question, *opts, explain, use_rag]
        outputs = [answer_md, probs, confidence, explanation, evidence]
        submit.click(answer, inputs, outputs, api_name="answer", concurrency_limit=2)
        question.submit(answer, inputs, outputs, api_visibility="private", concurrency_limit=2)
    return demo


def gradio_auth(settings: Any):
    """A Gradio login check accepting any user name with a configured API key as password; None without keys."""
    if not settings.auth_enabled:
        return None
    from .auth import check_key

    keys = settings.key_values()
    return lambda username, password: check_key(password or "", keys)


def mount_ui(app: Any, engine: Any, settings: Any, path: str = UI_PATH):
    import gradio as gr

    demo = build_ui(engine)
    return gr.mount_gradio_app(app, demo, path=path, auth=gradio_auth(settings), ssr_mode=False, css=CSS,
                               footer_links=[], mcp_server=False, show_error=True)
