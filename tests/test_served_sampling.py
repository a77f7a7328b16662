"""Sampling is checked before it is spent on (lm/sampling_check.py), and the converted embedded folder
samples when served (lm/local/convert.py): a greedy server stops Stage 1 in one line before any pair is
drawn; `transformers serve` of the folder `optimas model-path` prints collects pairs, as docs/serving.md says."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from optimas_cli.errors import UserError
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.local.registry import register_local_model
from optimas_cli.lm.sampling_check import PROBE, PROBE_SAMPLES, check_sampling
from optimas_cli.lm.types import LMRequest
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.prompt_component import PromptComponent
from tests.cli_runner import CLI, cli_env
from tests.fault_server import FaultServer
from tests.transformers_server import transformers_serve

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
SMOLLM2 = "local/smollm2-135m-instruct"
# PubMedQA's smoke run of optimas, kept short: its analyst and solver are prompt components on the served LM.
SHORT = ["pipeline=pubmedqa", "method=optimas", "budget=smoke", "budget.iterations=1", "repeats=1",
         "pipeline.analyst_max_tokens=12", "pipeline.solver_max_tokens=6", "lrf.min_steps=4", "lrf.train.epochs=2",
         "lrf.judge.enabled=false"]


class OnePrompt:
    """A system of one prompt component on the run's LM: what the probe looks at."""

    components = {"answer": PromptComponent("answer", "answers", {"q": "Q"}, "a", "Answer.", "", lambda t, x: t, 8)}


def served_ctx(api_base: str, cache_dir: Path) -> RunContext:
    lm = LMClient(model="hosted_vllm/served", api_base=api_base, cache_dir=str(cache_dir), max_retries=0)
    return RunContext(ledger=RunLedger(1), lm=lm, seed=0)


def test_a_greedy_server_is_refused_in_one_line_and_asked_again_each_time(tmp_path):
    with FaultServer() as server:  # answers "yes" to everything: a server that decodes greedily
        for attempt in (1, 2):  # the probe bypasses the call cache: a server fixed since is seen fixed
            ctx = served_ctx(server.api_base, tmp_path)
            with pytest.raises(UserError) as caught:
                check_sampling(OnePrompt, ctx, 0.9, "stage 1's candidates")
            assert server.chat_requests == attempt * 2 * PROBE_SAMPLES  # at 0.9, then at 1
    message = str(caught.value)
    assert "\n" not in message and "hosted_vllm/served at http://127.0.0.1" in message
    assert "decodes greedily" in message and "temperature 0.9 and 1" in message
    assert '"do_sample": true' in message and "docs/serving.md" in message
    usage = ctx.lm.usage.to_dict()["by_phase"]["sampling_check"]  # counted, as every call is
    assert usage["calls"] == 2 * PROBE_SAMPLES and usage["cache_hits"] == 0


def test_nothing_is_probed_at_temperature_0_or_on_a_local_model(tmp_path):
    with FaultServer() as server:
        check_sampling(OnePrompt, served_ctx(server.api_base, tmp_path), 0.0, "greedy candidates")
        local = RunContext(ledger=RunLedger(1), lm=LMClient(model=SMOLLM2, cache_dir=str(tmp_path)), seed=0)
        check_sampling(OnePrompt, local, 0.9, "stage 1's candidates")
        assert server.chat_requests == 0 and local.lm.usage.total().calls == 0


@pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")
def test_optimas_on_a_greedy_server_stops_before_stage_1(tmp_path):
    with FaultServer() as server:
        proc = subprocess.run([*CLI, "run", *SHORT, "lm=vllm", f"lm.api_base={server.api_base}",
                               "lm.model=hosted_vllm/served", f"hydra.run.dir={tmp_path / 'run'}"],
                              cwd=tmp_path, env=cli_env(OPTIMAS_CACHE_DIR=str(tmp_path / "cache")),
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "decodes greedily" in lines[0], proc.stderr
    assert server.chat_requests == 2 * PROBE_SAMPLES  # the probe's, nothing of the pipeline's
    assert not (tmp_path / "run" / "pairs.jsonl").exists() and not (tmp_path / "run" / "results.json").exists()


# ---- the embedded model: known to sample, whatever its folder says; its folder serves sampling --------------
@pytest.mark.real_model
def test_the_embedded_provider_samples_so_it_needs_no_probe(tmp_path):
    lm = LMClient(model=SMOLLM2, max_tokens=16, cache=False, cache_dir=os.environ.get("OPTIMAS_CACHE_DIR"))
    requests = [LMRequest(messages=PROBE, temperature=0.9, seed=0, sample_index=i) for i in range(PROBE_SAMPLES)]
    texts = [r.texts[0] for r in lm.complete(requests)]
    assert len(set(texts)) == PROBE_SAMPLES, texts


def test_do_sample_in_the_folder_leaves_the_embedded_provider_unchanged(tiny_model_dir, tmp_path):
    sampling = tmp_path / "sampling"
    shutil.copytree(tiny_model_dir, sampling)
    config = sampling / "generation_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_sample": True}))
    plain, served = register_local_model("local/tiny-plain", tiny_model_dir), register_local_model(
        "local/tiny-do-sample", sampling)
    lm = LMClient(max_tokens=12, cache=False, cache_dir=str(tmp_path))
    chats = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]

    def texts(model: str, temperature: float) -> list[str]:
        requests = [LMRequest(messages=m, model=model, temperature=temperature, seed=0) for m in chats]
        return [r.texts[0] for r in lm.complete(requests)]

    for temperature in (0.0, 0.9):  # greedy and seeded sampling: the provider's own arguments decide both
        assert texts(plain, temperature) == texts(served, temperature)


@pytest.mark.real_model
def test_the_converted_folder_samples_by_default():
    proc = subprocess.run([*CLI, "model-path"], env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    folder = Path(proc.stdout.strip())
    assert folder.name.startswith("smollm2-135m-instruct-v")
    assert json.loads((folder / "generation_config.json").read_text())["do_sample"] is True


def test_a_folder_converted_before_gets_do_sample(tmp_path):
    from optimas_cli.lm.local.convert import sample_by_default

    config = tmp_path / "generation_config.json"
    config.write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    sample_by_default(tmp_path)
    assert json.loads(config.read_text()) == {"bos_token_id": 1, "do_sample": True, "eos_token_id": 2}


# ---- `transformers serve` of the converted folder, as docs/serving.md runs it ----------------------------
def model_path() -> Path:
    proc = subprocess.run([*CLI, "model-path"], env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def greedy_copy(folder: Path, into: Path) -> Path:
    """The folder as converted before do_sample: its files linked, its generation_config without it."""
    into.mkdir()
    for item in folder.iterdir():
        if item.name != "generation_config.json":
            (into / item.name).symlink_to(item)
    config = json.loads((folder / "generation_config.json").read_text())
    config.pop("do_sample", None)
    (into / "generation_config.json").write_text(json.dumps(config))
    return into


# A server answers one request at a time: the served run is the smallest that still collects pairs and optimizes
SERVED = ["budget.train_size=3", "budget.val_size=2", "budget.test_size=2", "lrf.collect.num_candidates=2",
          "lrf.collect.mc_repeats=1"]


def served_run(api_base: str, folder: Path, run: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "run", *SHORT, *SERVED, "lm=vllm", f"lm.api_base={api_base}", f"lm.model=hosted_vllm/{folder}",
                           f"hydra.run.dir={run}"], cwd=run.parent, env=cli_env(OPTIMAS_CACHE_DIR=str(cache)),
                          capture_output=True, text=True, timeout=900)


@pytest.mark.real_model
@pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")
def test_transformers_serve_of_a_greedy_folder_is_refused_with_its_fix(tmp_path):
    folder = greedy_copy(model_path(), tmp_path / "greedy")
    with transformers_serve(folder) as api_base:
        proc = served_run(api_base, folder, tmp_path / "run", tmp_path / "cache")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "decodes greedily" in lines[0], proc.stderr
    assert f'add "do_sample": true to {folder / "generation_config.json"}' in lines[0]
    assert not (tmp_path / "run" / "pairs.jsonl").exists() and not (tmp_path / "run" / "results.json").exists()


@pytest.mark.real_model
@pytest.mark.slow  # a served optimization, 2-3 minutes; the greedy refusal above serves the same model in CI
@pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")
def test_transformers_serve_of_the_converted_folder_collects_pairs_and_runs(tmp_path):
    folder = model_path()
    with transformers_serve(folder) as api_base:
        proc = served_run(api_base, folder, tmp_path / "run", tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "decodes greedily" not in proc.stdout + proc.stderr
    pairs = (tmp_path / "run" / "pairs.jsonl").read_text().splitlines()
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert len(pairs) > 0 and results["lrf"]["n_pairs"] == len(pairs)
    lm = results["ledger"]["lm"]
    assert lm["by_phase"]["sampling_check"]["calls"] == PROBE_SAMPLES  # distinct at the first temperature
    assert set(lm["by_model"]["problem_solver"]) == {f"hosted_vllm/{folder}"}
