"""`optimas device-check [--out summary.json] [--only lm,lrf,grpo,policies]`: the embedded LM provider, the LRF,
GRPO and the node policies on CUDA in bfloat16, one short run of the project's own code paths on tiny random
models built in seconds (no download): device_check_lm.py and device_check_training.py say what each checks.

Each check prints one line, PASS / FAIL / WARN / INFO / SKIP, with its numbers; the exit status is 1 when any
check FAILs. Without CUDA every check runs on the CPU (the first line says so). A check whose library is not
installed (litellm, peft, trl, datasets) is SKIPped with the reason.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

USAGE = "optimas device-check [--out summary.json] [--only lm,lrf,grpo,policies]"
GROUPS = ("lm", "lrf", "grpo", "policies")
# The tiny models are local: nothing is fetched, nothing reports home, no bar per weight file.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="optimas device-check", usage=USAGE, description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON summary here (default: only the lines on stdout)")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups: {', '.join(GROUPS)}")
    opts = parser.parse_args(args)
    wanted = [c.strip() for c in opts.only.split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(GROUPS))
    if unknown:
        parser.error(f"unknown check group(s) {', '.join(unknown)}; use {', '.join(GROUPS)}")
    opts.only = wanted
    return opts


def environment() -> dict:
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.cuda.is_available()}
    for dist in ("transformers", "peft", "trl", "datasets", "litellm", "accelerate", "huggingface_hub", "numpy"):
        try:
            info[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            info[dist] = None
    if info["cuda"]:
        info["gpu"] = torch.cuda.get_device_name(0)
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    return info


def device_check_main(args: list[str]) -> int:
    try:
        opts = parse(args)
    except SystemExit as exc:  # argparse already printed the usage line
        return 0 if exc.code == 0 else 2
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    work = Path(tempfile.mkdtemp(prefix="optimas-device-check-"))
    os.environ.setdefault("OPTIMAS_CACHE_DIR", str(work / "cache"))  # never the user's ~/.cache/optimas
    try:
        return run(opts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(opts: argparse.Namespace, work: Path) -> int:
    import torch

    from optimas_cli.flows.device_check_lm import check_lm
    from optimas_cli.flows.device_check_session import Session
    from optimas_cli.flows.device_check_training import check_grpo, check_lrf, check_policies

    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    checks = {"lm": check_lm, "lrf": check_lrf, "grpo": check_grpo, "policies": check_policies}
    torch.manual_seed(0)
    env = environment()
    where = f"CUDA on {env['gpu']}" if env["cuda"] else "NO CUDA: every check runs on the CPU in float32"
    print(f"device check: {where}; " + ", ".join(f"{k} {v}" for k, v in env.items() if k not in ("cuda", "gpu")),
          flush=True)
    session = Session(work)
    started = time.perf_counter()
    for group in opts.only:
        session.run_check(group, checks[group])
    counts, failed, seconds = session.counts(), session.failed(), time.perf_counter() - started
    print(f"device check: {', '.join(f'{v} {k}' for k, v in counts.items() if v)} in {seconds:.1f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    if opts.out:
        summary = {"environment": env, "checks": session.results, "counts": counts, "failed": failed,
                   "seconds": round(seconds, 1)}
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps(summary, indent=2, default=str))
    return 1 if failed else 0
