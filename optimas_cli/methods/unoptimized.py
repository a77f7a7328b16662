"""Baseline: the pipeline exactly as declared (every component at its initial configuration)."""
from __future__ import annotations

from optimas_cli.methods.base import Method, MethodOutcome


class Unoptimized(Method):
    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        return MethodOutcome(config=pipeline.system.default_config())
