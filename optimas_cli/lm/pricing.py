"""The dollar price of one API call: litellm's own cost map (the offline copy it ships), or the user's
rate (`lm.price.input_per_mtok` / `output_per_mtok`, dollars per million tokens); None when neither
knows the model, so a run reports the call as unpriced instead of pretending it was free."""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimas_cli.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallPrice:
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None

    @classmethod
    def from_config(cls, price: Mapping[str, Any] | None) -> CallPrice:
        price = dict(price or {})
        unknown = sorted(set(price) - {"input_per_mtok", "output_per_mtok"})
        if unknown:
            raise UserError(f"unknown lm.price setting(s) {unknown}", "use lm.price.input_per_mtok and lm.price.output_per_mtok")
        rates = {}
        for name in ("input_per_mtok", "output_per_mtok"):
            value = price.get(name)
            if value is None:
                rates[name] = None
                continue
            try:
                rates[name] = float(value)
            except (TypeError, ValueError):
                raise UserError(f"lm.price.{name} must be a number of dollars per million tokens, got {value!r}",
                                f"e.g. lm.price.{name}=0.15") from None
            if rates[name] < 0:
                raise UserError(f"lm.price.{name} must not be negative, got {value!r}", f"e.g. lm.price.{name}=0.15")
            if not math.isfinite(rates[name]):  # nan or inf: no dollar sum, and no budget.max_usd, would mean anything
                raise UserError(f"lm.price.{name} must be a finite number, got {value!r}", f"e.g. lm.price.{name}=0.15")
        if (rates["input_per_mtok"] is None) != (rates["output_per_mtok"] is None):
            raise UserError("lm.price needs both input_per_mtok and output_per_mtok (or neither)",
                            "set both, e.g. lm.price.input_per_mtok=0.15 lm.price.output_per_mtok=0.6")
        return cls(**rates)

    @property
    def set_by_user(self) -> bool:
        return self.input_per_mtok is not None

    def cost(self, model: str, response: Any, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Dollars for one call: the user's rate when set (it wins: e.g. a negotiated price or a
        self-hosted model), else litellm's cost map; None when the model has no known price."""
        if self.set_by_user:
            return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6
        import litellm  # here, not at the top: the CLI checks prices before anything loads litellm (seconds)

        try:
            return float(litellm.completion_cost(completion_response=response, model=model))
        except Exception:  # litellm raises a variety of errors for a model missing from its map
            log.debug("no price for %s in litellm's cost map", model)
            return None
