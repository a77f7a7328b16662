"""pipeline=dspy: a user's DSPy program (a dspy.Module) optimized as a compound system.

    optimas run pipeline=dspy program=my_program:program method=optimas

Each named predictor becomes a prompt component whose configuration is its signature's instructions; the
Python code between predictors runs as code components; the wiring is the order a dry run on training
examples calls the predictors in (system.py, components.py). Every LM call goes through the run's LM layer.
`optimas export <run> --program FILE.json` writes the optimized program in DSPy's save format
(`program.load(FILE.json)`), and `optimas_cli.api.load(<run>).program()` returns it. DSPy comes with the
optional `baselines` extra; without it this pipeline is refused in one line, before any run folder.
"""
from __future__ import annotations

import importlib.util

from optimas_cli.errors import UserError
from optimas_cli.methods.extras import EXTRA, NEEDS
from optimas_cli.system import Pipeline

# the DSPy bridge this pipeline runs its predictors through is the dspy method's (methods/dspy_mipro.py)
BRIDGE = "optimas_cli.methods.dspy_mipro"


def build(data_dir: str | None = None, program: str | None = None, trainset: str = "trainset",
          devset: str = "devset", testset: str = "testset", metric: str = "metric", max_tokens: int = 256) -> Pipeline:
    """`program`: module:attribute of a dspy.Module (an instance, or a class built with no arguments);
    `trainset`, `devset`, `testset`, `metric`: attributes of the program's module, or module:attribute;
    `max_tokens`: per predictor call. `data_dir` is unused: the program's module holds its data."""
    missing = [lib for lib in NEEDS[BRIDGE] if importlib.util.find_spec(lib) is None]
    if missing:
        raise UserError(f"pipeline=dspy needs {', '.join(missing)}, which the optional '{EXTRA}' extra installs",
                        f"pip install 'optimas[{EXTRA}]' (in a checkout: pip install -e '.[{EXTRA}]')")
    from optimas_pipelines.dspy_program.system import build_program_pipeline

    return build_program_pipeline(program, trainset, devset, testset, metric, max_tokens)
