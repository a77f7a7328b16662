"""STaRK-Prime (paper Section 5): rank each biomedical query's five PrimeKG candidates; metric MRR.

The queries and splits are real (data folder); the knowledge base comes from stark-qa, a local
folder or a prebuilt candidates file -- see README.md in this package.
"""
from optimas_pipelines.stark_prime.system import build

__all__ = ["build"]
