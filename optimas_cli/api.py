"""optimas from Python (a notebook, a script, a service): run an experiment with the command line's
overrides, and load a finished run's optimized system to call it on new inputs.

    import optimas_cli.api as optimas

    result = optimas.run("pipeline=toy_hint", "method=unoptimized")   # the same overrides as `optimas run`
    result.test["mean"], result.folder
    system = optimas.load(result.folder)       # configuration, LoRA adapters and LRF routes of that run
    system = optimas.load("export.yaml")        # or the file `optimas export <run folder>` wrote
    system({"question": "...", ...})            # -> the system's final outputs for that input
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.errors import UserError

if TYPE_CHECKING:
    from optimas_cli.flows.export import SavedSystem


@dataclass
class RunResult:
    """A finished run: its folder and its results.json."""

    folder: Path
    results: dict

    @property
    def test(self) -> dict | None:
        return self.results.get("test")

    def load(self, *overrides: str) -> OptimizedSystem:
        return load(self.folder, *overrides)


def run(*overrides: str, folder: str | Path | None = None, console: Console | None = None) -> RunResult:
    """One `optimas run` (or `task=eval|collect|train-lrf`) in this process, checked as the command line
    checks it; bad input raises UserError. The folder is outputs/<date>/<time>-<pipeline>-<method>
    unless given; tracking=mlflow|wandb logs it as the command line does. Sweeps (comma lists) are the
    command line's: loop in Python instead."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import open_dict

    from optimas_cli.app import save_config, task_flow
    from optimas_cli.conf import search_path
    from optimas_cli.environment import importable_here, prepare_process, quiet_libraries
    from optimas_cli.flows.resume import refuse_a_run_in
    from optimas_cli.overrides import check_overrides
    from optimas_cli.system.run_folder import RunFolder
    from optimas_cli.tracking.callback import settings, track_folder

    prepare_process()
    importable_here()  # a pipeline module beside the notebook imports, as on the command line
    found = search_path(list(overrides))
    task = next((o.split("=", 1)[1] for o in found.args if o.startswith("task=")), None)
    args = [*found.args, *(["+run_label=eval"] if task == "eval" else [])]
    cfg = check_overrides(args, found, with_hydra=True)
    overrides_given = [a for a in args if "=" in a and not a.startswith("-")]
    swept = [o.input_line for o in OverridesParser.create().parse_overrides(overrides_given) if o.is_sweep_override()]
    if swept:
        raise UserError(f"optimas.api.run runs one experiment, got a sweep: {swept[0]}",
                        "call run() once per value, or use `optimas run -m` for a sweep")
    quiet_libraries()
    HydraConfig.instance().set_config(cfg)  # the run folder's name and ${hydra:...} resolve as in a CLI run
    resume = cfg.get("resume")
    if folder and resume and Path(folder).resolve() != Path(resume).resolve():
        raise UserError(f"resume={resume} continues in its own folder, not in folder={folder}",
                        "drop folder=, or pass the same folder to both")
    path = folder or resume or str(cfg.hydra.run.dir)  # resume= continues in the run's folder, as on the command line
    refuse_a_run_in(path, resume, key="folder=")
    where = RunFolder(path)
    with open_dict(cfg):
        del cfg["hydra"]  # the job's config, as Hydra hands it to a task
    where.lock()  # one writer per folder, as on the command line
    try:
        save_config(cfg, where)
        results = task_flow(str(cfg.task))(cfg, where, console or Console(highlight=False, soft_wrap=True))
    finally:
        where.unlock()
    track_folder(settings(cfg), where.path)
    return RunResult(where.path, results)


class OptimizedSystem:
    """A finished run's compound system with the configuration it found: call it on new inputs."""

    def __init__(self, saved: SavedSystem, cfg: DictConfig):
        from optimas_cli.flows.evaluate import fitting_config
        from optimas_cli.flows.setup import LazyLM, build_pipeline, seed_everything
        from optimas_cli.system import RunContext, RunLedger, routes_by_lrf

        self.source, self.cfg = saved.source, cfg
        seed_everything(int(cfg.seed))
        self.pipeline = build_pipeline(cfg)
        self.config = (self.pipeline.system.default_config() if saved.values is None
                       else fitting_config(self.pipeline, saved.values, str(saved.source)))
        self.lrf = None
        if any(routes_by_lrf(value) for value in self.config.values()):
            if saved.lrf is None or not saved.lrf.is_dir():
                raise UserError(f"{saved.source} routes by the local reward, and {saved.lrf or 'no lrf folder'} "
                                "holds no reward model", "keep the run's lrf/ folder where the export names it")
            from optimas_cli.lrf.model import LocalRewardModel

            self.lrf = LocalRewardModel.load(saved.lrf)
        self.ctx = RunContext(ledger=RunLedger(len(self.pipeline.system)), lm=LazyLM(cfg.lm), lrf=self.lrf,
                              seed=int(cfg.seed), phase="serve")

    @property
    def components(self) -> list[str]:
        return list(self.pipeline.system.components)

    def program(self):
        """The optimized system in the form you wrote it: for pipeline=dspy, your DSPy program (a copy) with the
        optimized instructions, to call, `.save(path)` or compile further in DSPy."""
        if self.pipeline.to_program is None:
            raise UserError(f"pipeline {self.pipeline.name!r} is not a program of yours",
                            "program() is for runs of pipeline=dspy; call the system itself: system({...})")
        return self.pipeline.to_program(self.config)

    def __call__(self, inputs: dict | list[dict]) -> dict | list[dict]:
        """The system's final outputs for one input (a dict of its input fields) or for a list of them."""
        from optimas_cli.flows.evaluate import check_inputs

        batch = [inputs] if isinstance(inputs, dict) else list(inputs)
        for i, row in enumerate(batch):
            try:
                check_inputs(row, self.pipeline.system.inputs)
            except (KeyError, TypeError) as exc:
                raise UserError(f"input {i}: {exc}", f"pass dicts with the fields {list(self.pipeline.system.inputs)}") from None
        trajectories = self.pipeline.system.run(batch, self.config, self.ctx)
        outputs = [t.final(self.pipeline.system.outputs) for t in trajectories]
        return outputs[0] if isinstance(inputs, dict) else outputs

    def evaluate(self, examples: list[dict], repeats: int = 1) -> dict:
        """Mean, std, per-example scores of the pipeline's metric on `examples` (inputs plus gold fields)."""
        from optimas_cli.system.evaluate import evaluate

        return evaluate(self.pipeline, self.config, examples, self.ctx.replace(phase="test"), repeats)


def load(path: str | Path, *overrides: str) -> OptimizedSystem:
    """The optimized system of a finished run folder (its config.yaml, best_config.json, LoRA adapters and
    lrf/ for per-input routes) or of a file written by `optimas export` (the same, in one file).
    `overrides` change the saved config (e.g. "lm.api_base=http://...", "data_dir=..."), never what the
    run found."""
    from optimas_cli.flows.export import from_export, from_run_folder

    path = Path(path)
    saved = from_export(path) if path.is_file() else from_run_folder(path)
    cfg = OmegaConf.merge(saved.cfg, OmegaConf.from_dotlist(list(overrides))) if overrides else saved.cfg
    return OptimizedSystem(saved, cfg)
