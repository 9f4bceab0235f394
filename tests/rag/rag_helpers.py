"""Shared data for the RAG tests (a module with a unique name: ``import conftest`` is ambiguous)."""
from __future__ import annotations

import json
from pathlib import Path

DOCS = {
    "angina": "Stable angina is chest pain on exertion relieved by rest. Sublingual nitroglycerin relieves attacks. "
              "Beta blockers reduce myocardial oxygen demand and are first-line for prevention.",
    "heart-failure": "Heart failure with reduced ejection fraction is treated with ACE inhibitors, beta blockers and "
                     "mineralocorticoid antagonists. Loop diuretics relieve congestion but do not improve survival.",
    "af": "Atrial fibrillation is an irregularly irregular rhythm without P waves. Anticoagulation is guided by the "
          "CHA2DS2-VASc score. Rate control uses beta blockers or diltiazem.",
    "kawasaki": "Kawasaki disease causes coronary artery aneurysms in children. Treatment is intravenous "
                "immunoglobulin with high-dose aspirin.",
    "digoxin": "Digoxin inhibits the sodium potassium ATPase. Toxicity causes nausea, yellow vision and arrhythmias, "
               "worsened by hypokalaemia.",
    "warfarin": "Warfarin antagonises vitamin K epoxide reductase. Its effect is monitored with the INR and reversed "
                "with vitamin K and prothrombin complex concentrate.",
}


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
