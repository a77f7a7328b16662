"""What every prompt proposer shows its optimizer LM of a component, and how it samples that LM: shared by the
OPRO search (prompt.py) and GEPA's reflection (prompt_gepa.py)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from optimas_cli.optim.proposal import setting

NO_INSTRUCTION = "(no instruction: the component's built-in behaviour)"


def clipped(value: Any, limit: int) -> str:
    """A field's value as the optimizer LM is shown it: text (JSON for anything else), cut to `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


def lm_request(cfg: Mapping | None) -> dict:
    """The optimizer LM's sampling settings (temperature, max_tokens, and `lm`: another model than the task's)."""
    request = {"temperature": float(setting(cfg, "temperature", 0.7)), "max_tokens": int(setting(cfg, "max_tokens", 256))}
    if setting(cfg, "lm", None):
        request["model"] = str(setting(cfg, "lm", None))
    return request
