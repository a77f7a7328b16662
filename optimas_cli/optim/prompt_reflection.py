"""GEPA's reflection LM served by the run's LM layer, for both of GEPA's uses: the `gepa` method's
(methods/gepa_adapter.py, tagged "gepa.reflection") and Algorithm 1's `gepa` prompt proposer
(optim/prompt_gepa.py, tagged "<component>.optimizer"). Calls are cached and counted in the usage ledger."""
from __future__ import annotations

import threading

from optimas_cli.lm.types import LMRequest
from optimas_cli.system import RunContext

REFLECTION_TAG = "gepa.reflection"


class RunReflectionLM:
    """GEPA's reflection LM (`prompt -> text`, and `batch_complete` for a batched reflection), served
    by the run's LM client. Each call gets its own sample index, so two identical reflection prompts
    at temperature > 0 are two samples, seeded by the run's seed. `tag`: the calls' name in the usage
    ledger; `model`: another model than the run's (None: the run's)."""

    def __init__(self, ctx: RunContext, max_tokens: int, temperature: float, tag: str = REFLECTION_TAG,
                 model: str | None = None):
        self.ctx, self.max_tokens, self.temperature = ctx, int(max_tokens), float(temperature)
        self.tag, self.model = tag, model
        self.calls = 0
        self.error: BaseException | None = None  # GEPA logs a failed reflection and goes on; its caller re-raises it
        self._lock = threading.Lock()

    def __call__(self, prompt: str | list[dict]) -> str:
        return self.batch_complete([[{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt])[0]

    def batch_complete(self, messages_list: list[list[dict]]) -> list[str]:
        with self._lock:
            first = self.calls
            self.calls += len(messages_list)
        requests = [LMRequest(messages=m, model=self.model, temperature=self.temperature, max_tokens=self.max_tokens,
                              seed=self.ctx.seed, sample_index=self.ctx.sample_index + first + i)
                    for i, m in enumerate(messages_list)]
        try:
            responses = self.ctx.lm.complete(requests, component=self.tag, phase=self.ctx.phase)
        except Exception as error:
            self.error = self.error or error
            raise
        return [r.texts[0] for r in responses]
