"""PubMedQA: per-instance model selection for biomedical yes/no/maybe questions (paper Section 5)."""
from optimas_pipelines.pubmedqa.system import build

__all__ = ["build"]
