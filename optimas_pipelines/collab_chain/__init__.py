"""Two local models in a chain on PubMedQA: SysDPO's "LLM collaboration" setting (x -> psi1 -> y -> psi2 -> z)."""
from optimas_pipelines.collab_chain.system import build

__all__ = ["build"]
