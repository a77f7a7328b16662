"""What a careless user types is refused before any work (issue: a bad price, key, seed, backbone, sweep
value, tracking folder or damaged run folder): `optimas plan` and `optimas run` exit 2 with one line naming
the problem and its fix, and no run folder (nor sqlite folder) exists afterwards. Also the LM call cache
keys lm.litellm_kwargs, and a server that drops the connection is named as such, not as HTTP 500."""
from __future__ import annotations

import importlib.util

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from optimas_cli.cli import main
from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import LMCallFailed, UserError
from optimas_cli.lm.cache import call_key
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.types import LMRequest
from optimas_cli.system.run_folder import RunFolder
from tests.fault_server import FaultServer

TOY = ["pipeline=toy_retriever", "method=optimas"]
PRICED = ["lm.price.input_per_mtok=1", "lm.price.output_per_mtok=1"]


def refused(capsys, args: list[str], expected: str) -> str:
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("overrides, expected", [
    (["compute.price_per_hour=nan"], "compute.price_per_hour must be dollars per hour (a finite number, 0 or more)"),
    (["compute.price_per_hour=inf"], "compute.price_per_hour must be dollars per hour (a finite number, 0 or more)"),
    ([*PRICED, "lm.price.input_per_mtok=nan"], "lm.price.input_per_mtok must be a finite number, got nan"),
    ([*PRICED, "lm.price.output_per_mtok=inf"], "lm.price.output_per_mtok must be a finite number, got inf"),
    (["+foo=bar"], "unknown key foo — the config (conf/config.yaml) takes budget, compute,"),
    (["+sed=1"], "unknown key sed — did you mean seed?"),
    (["+compute.anything=1"], "unknown key compute.anything — compute takes price_per_hour"),
    (["+compute.price_per_hr=1"], "unknown key compute.price_per_hr — did you mean compute.price_per_hour?"),
    (["seed=4294967296"], "seed=4294967296 must be at most 4294967295 — seed takes an integer from 0 to 4294967295"),
    (["lrf.seed=100000000000000000000000"], "lrf.seed=100000000000000000000000 must be at most 4294967295"),
    (["lrf.train.seed=4294967296"], "lrf.train.seed=4294967296 must be at most 4294967295"),
    (["method.seed=4294967296"], "method.seed=4294967296 must be at most 4294967295"),
    (["lrf.backbone="], "lrf.backbone='' is not allowed — lrf.backbone takes a Hugging Face model id"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_bad_value_stops_plan_and_run_in_one_line(tmp_path, capsys, overrides, expected):
    run_dir = tmp_path / "run"
    for command in ("plan", "run"):
        refused(capsys, [command, *TOY, *overrides, f"hydra.run.dir={run_dir}"], expected)
        assert not run_dir.exists()


def test_the_largest_seed_and_a_free_compute_price_pass(tmp_path, capsys):
    assert main(["plan", *TOY, *PRICED, "seed=4294967295", "lrf.seed=4294967295", "compute.price_per_hour=0"]) == 0


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="the mlflow extra is not installed")
def test_an_mlflow_database_in_a_missing_folder_is_refused_without_creating_it(tmp_path, capsys):
    missing = tmp_path / "no" / "such"
    for command in ("plan", "run"):
        line = refused(capsys, [command, *TOY, "tracking=mlflow", f"tracking.uri=sqlite:///{missing / 'mlflow.db'}",
                                f"hydra.run.dir={tmp_path / 'run'}"], f"names a database in {missing}, which does not exist")
        assert f"mkdir -p {missing}" in line
        assert not (tmp_path / "no").exists() and not (tmp_path / "run").exists()


def test_every_job_of_a_sweep_is_checked_before_the_first_runs(tmp_path, capsys):
    """The jobs are the product of an experiment's hydra.sweeper.params and the command line's lists (before:
    job 0 ran, and the sweep stopped at the job holding the bad value; test_cli_bad_values has the plain case)."""
    experiment = tmp_path / "conf" / "experiment" / "seeds.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\nhydra:\n  sweeper:\n    params:\n      lrf.seed: 0,4294967296\n")
    refused(capsys, ["run", "-m", "--config-dir", str(tmp_path / "conf"), "experiment=seeds", *TOY, "seed=0,1",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"], "lrf.seed=4294967296 must be at most 4294967295")
    assert not (tmp_path / "sweep").exists()


# -- resume of a damaged run folder -----------------------------------------------------------------
NO_ADAPT = ["pipeline=toy_hint", "method=optimas_no_adapt", "budget=smoke"]


@pytest.fixture
def run_folder(tmp_path):
    """A run folder as a killed optimas_no_adapt run leaves it: its config, accounts and loop checkpoint."""
    folder = tmp_path / "run"
    folder.mkdir()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        (folder / "config.yaml").write_text(OmegaConf.to_yaml(compose("config", NO_ADAPT), resolve=True))
    (folder / "accounts.json").write_text('{"ledger": {"runs": 3.0}, "lm": {}, "saved_at": 1.0}\n')
    (folder / "loop_state.json").write_text('{"iteration": 1, "config": {}, "history": []}\n')
    return folder


def half(data: bytes) -> bytes:
    return data[: len(data) // 2]


@pytest.mark.parametrize("name, damage", [
    ("loop_state.json", half),  # before: a 35-47-line traceback
    ("accounts.json", half),
    ("accounts.json", lambda data: b"\xff" + data),
    ("config.yaml", half),  # its last line cut: before, "is a run of method 'optimas_no_adapt'" or the like
    ("config.yaml", lambda data: data[: data.index(b"\nbudget:") + 1]),  # whole lines, up to a group
], ids=["loop_state cut", "accounts cut", "accounts not UTF-8", "config mid-line", "config at a line"])
def test_a_damaged_state_file_is_one_line_naming_it(run_folder, capsys, name, damage):
    damaged = run_folder / name
    damaged.write_bytes(damage(damaged.read_bytes()))
    before = sorted(p.name for p in run_folder.iterdir())
    for command in ("plan", "run"):
        line = refused(capsys, [command, *NO_ADAPT, f"resume={run_folder}"], f"{damaged} is damaged")
        assert "restore the file from a copy, or start over in a new run folder (without resume=)" in line
    assert sorted(p.name for p in run_folder.iterdir()) == before  # Hydra never wrote its .hydra/ there


def test_a_checkpoint_damaged_mid_run_is_one_line_where_it_is_read(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.file("loop_state.json").write_text('{"iteration": 1, "hist')
    with pytest.raises(UserError, match=r"loop_state\.json is damaged \(Unterminated string"):
        folder.read_json("loop_state.json")
    assert folder.read_json("absent.json", {"none": True}) == {"none": True}


# -- the LM call cache and a dropped connection ------------------------------------------------------
CHAT = [{"role": "user", "content": "Is the sky blue?"}]


def test_litellm_kwargs_enter_the_cache_key_only_when_set():
    base = call_key("m", CHAT, 0.0, 16)
    assert call_key("m", CHAT, 0.0, 16, litellm_kwargs={}) == base == call_key("m", CHAT, 0.0, 16, litellm_kwargs=None)
    assert call_key("m", CHAT, 0.0, 16, litellm_kwargs={"top_p": 0.5}) != base


def test_two_runs_that_differ_only_in_litellm_kwargs_do_not_share_answers(tmp_path):
    with FaultServer("good") as server:
        def ask(**extra) -> None:
            LMClient(model="hosted_vllm/served", api_base=server.api_base, cache_dir=str(tmp_path), **extra).complete(
                [LMRequest(CHAT)])

        ask()
        ask(litellm_kwargs={"top_p": 0.5})
        assert server.chat_requests == 2  # before: the second was the first's cached answer
        ask()
        assert server.chat_requests == 2  # the same settings still share their row


def test_a_dropped_connection_is_named_not_called_http_500():
    with FaultServer("drop") as server:
        lm = LMClient(model="hosted_vllm/served", api_base=server.api_base, cache=False, max_retries=2,
                      retry_base_seconds=0.01, timeout=1.0)
        with pytest.raises(LMCallFailed) as caught:
            lm.complete([LMRequest(CHAT)])
    message = str(caught.value)
    assert "dropped the connection before its reply was complete (after 3 tries)" in message, message
    assert "HTTP 500" not in message and "\n" not in message
    assert server.chat_requests == 3  # a dropped connection is worth another try
