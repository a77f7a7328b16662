"""HotpotQA multi-hop question answering: five components, answer F1 (paper Section 5, Appendix C)."""
from __future__ import annotations

from optimas_pipelines.hotpotqa.system import build

__all__ = ["build"]
