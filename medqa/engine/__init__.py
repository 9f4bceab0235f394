"""Answer-and-explain engine: one object owns model, tokenizer, calibration and retriever.

``medqa ask``, ``medqa predict``, the HTTP API and the UI are thin layers over :class:`Engine`::

    from medqa.engine import Engine
    engine = Engine.load("embedded")                    # or a Hub id / folder, adapter=..., retriever=...
    result = engine.answer("Drug of choice for ...?", ["A", "B", "C", "D"])
    print(result.answer_letter, result.probabilities, result.explanation)

Importing this package is cheap (no torch); the model loads in :meth:`Engine.load`.
"""
from .core import DEFAULT_MAX_NEW_TOKENS, Engine  # noqa: F401
from .generation import Completion  # noqa: F401
from .options import content_id, make_item, parse_options_text, split_question_options  # noqa: F401
from .result import (  # noqa: F401
    DISCLAIMER, HIGH_CONFIDENCE, MEDIUM_CONFIDENCE, PLAUSIBLE_FRACTION, SCHEMA_VERSION, AnswerResult, Passage,
    confidence_label, decide, extract_citations, plausible_letters,
)
