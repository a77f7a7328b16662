"""BigCodeBench: code generator, unit-test generator, sandboxed executor, final code generator (pass rate)."""
from optimas_pipelines.bigcodebench.system import build

__all__ = ["build"]
