"""Amazon next-item selection: trainable local models feeding a prompted decider (paper Section 5)."""
from optimas_pipelines.amazon.system import build

__all__ = ["build"]
