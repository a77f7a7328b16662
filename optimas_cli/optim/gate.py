"""ValidationGate: whether Algorithm 1 keeps a candidate configuration, judged on per-example validation scores.

`strict` is the paper's rule: keep the candidate when its summed validation reward is strictly
higher. On a small validation set that rule keeps noise: one lucky example is enough. `paired`
(beyond the paper) keeps it only when the lower bound of a one-sided paired bootstrap CI of the
per-example gain, at level `alpha`, is above 0. Both rules record the same evidence, so a
history shows how sure every decision was.
"""
from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from optimas_cli.errors import UserError
from optimas_cli.stats import detectable_effect, paired_lower_bound

log = logging.getLogger("optimas")
RULES = ("strict", "paired")


@dataclass(frozen=True)
class GateDecision:
    rule: str
    alpha: float
    accepted: bool
    delta: float    # mean per-example gain of the candidate over the current configuration
    ci_low: float   # one-sided lower bound at level alpha
    ci_high: float  # the matching upper bound
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


class ValidationGate:
    def __init__(self, rule: str = "strict", alpha: float = 0.1, seed: int = 0):
        if rule not in RULES:
            raise UserError(f"unknown method.gate {rule!r}", f"use one of {', '.join(RULES)}")
        if not 0 < float(alpha) < 0.5:
            raise UserError(f"method.gate_alpha={alpha} is outside (0, 0.5)", "use e.g. method.gate_alpha=0.1")
        self.rule, self.alpha, self.seed = rule, float(alpha), seed

    def decide(self, before: Sequence[float], after: Sequence[float]) -> GateDecision:
        """`before` and `after` score the same validation examples, in the same order."""
        bound = paired_lower_bound(before, after, self.alpha, seed=self.seed)
        if self.rule == "strict":
            accepted = float(sum(after)) > float(sum(before))  # ties and losses are rejected
        else:
            accepted = bound.low > 0
        return GateDecision(self.rule, self.alpha, accepted, bound.estimate, bound.low, bound.high, len(before))

    def log_detectable(self, scores: Sequence[float]) -> float:
        """Log the smallest gain this validation set can tell from noise; warn when it is large."""
        if not scores:
            return 0.0
        effect = detectable_effect(scores, self.alpha, seed=self.seed)
        mean = statistics.fmean(scores)
        log.info("validation gate %s: %d examples detect a mean gain of %.4f at alpha=%.2f (mean score %.4f)",
                 self.rule, len(scores), effect, self.alpha, mean)
        if mean > 0 and effect > 0.1 * mean:
            log.warning("the validation set is small for its noise: only gains above %.4f (%.0f%% of the mean "
                        "score %.4f) are distinguishable from chance; a larger budget.val_size lowers that, and "
                        "method.gate=paired keeps smaller gains from being accepted", effect, 100 * effect / mean, mean)
        return effect
