"""Issue 47: every config value is typed and ranged in optimas_cli/config_schema.py, and every command
that composes a config refuses a bad one at start: exit 2, one line naming the key, the value and what
it takes, before a folder is made or a model loaded."""
from __future__ import annotations

import inspect
import re

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from optimas_cli import config_kinds as kind
from optimas_cli import config_schema as schema
from optimas_cli.cli import main
from optimas_cli.conf import CONF_DIR, options
from optimas_cli.errors import UserError
from optimas_cli.flows.resume import check_resume
from optimas_cli.flows.validate import check_values

TOY = ["pipeline=toy_hint", "method=optimas"]


def refused(capsys, argv: list[str]) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("optimas: "), err
    return lines[0]


# Issue 47's values: each passed `plan` and crashed `run` (or ran with it), or was sent to the server.
BAD_VALUES = [
    ("lm.max_retries=-1", "lm.max_retries=-1 must be at least 0 — lm.max_retries takes an integer >= 0"),
    ("lm.max_tokens=abc", "lm.max_tokens='abc' is not an integer — lm.max_tokens takes an integer >= 1"),
    ("lrf.train.epochs=ten", "lrf.train.epochs='ten' is not an integer"),
    ("lrf.min_steps=abc", "lrf.min_steps='abc' is not an integer — lrf.min_steps takes an integer >= 0"),
    ("lm.timeout=abc", "lm.timeout='abc' is not a number — lm.timeout takes a number > 0"),
    ("method.gate=bogus", "method.gate='bogus' is not allowed — method.gate takes one of strict | paired"),
    ("lrf.train.lr=abc", "lrf.train.lr='abc' is not a number"),
    ("lrf.collect.mc_repeats=abc", "lrf.collect.mc_repeats='abc' is not an integer"),
    ("+pipeline.foo=1", "unknown key pipeline.foo: optimas_pipelines.toys.hint.build() takes no settings"),
    ("lm.max_token=3", "unknown key lm.max_token — did you mean lm.max_tokens?"),
    ("+lrf.min_step=3", "unknown key lrf.min_step — did you mean lrf.min_steps?"),
    ("method.optimizer.weights.stps=3", "did you mean method.optimizer.weights.steps?"),
    ("proposer=bogus", "proposer='bogus' is not allowed — proposer takes one of auto | lm | pool | mixed"),
    ("repeat=3", "unknown key repeat — did you mean repeats?"),
    ("lm.local.gather_seconds=nan", "lm.local.gather_seconds=nan is not a finite number"),
]


@pytest.mark.parametrize("command", ["plan", "run"])
@pytest.mark.parametrize("override, expected", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_plan_and_run_refuse_the_same_bad_value_in_one_line(tmp_path, capsys, command, override, expected):
    run_dir = tmp_path / "run"
    line = refused(capsys, [command, *TOY, override, f"hydra.run.dir={run_dir}"])
    assert expected in line
    assert not run_dir.exists()


@pytest.mark.parametrize("command", ["collect", "train-lrf", "eval", "headroom"])
def test_every_command_that_composes_a_config_refuses_it(tmp_path, capsys, command):
    args = [command, *TOY, "lm.timeout=abc"]
    if command != "headroom":
        args.append(f"hydra.run.dir={tmp_path / 'run'}")
    assert "lm.timeout='abc' is not a number" in refused(capsys, args)
    assert not (tmp_path / "run").exists()


def test_a_pipeline_takes_only_the_keys_its_build_names(capsys):
    line = refused(capsys, ["plan", "pipeline=hotpotqa", "+pipeline.retreiver=bm25"])
    assert "unknown key pipeline.retreiver — did you mean pipeline.retriever?" in line
    line = refused(capsys, ["plan", "pipeline=synthetic", "+pipeline.zzz=1"])
    assert "optimas_pipelines.synthetic.system.build() takes components, shape, kinds" in line  # the keys it does take
    assert "pipeline.components=1 must be at least 2" in refused(capsys, ["plan", "pipeline=synthetic",
                                                                            "pipeline.components=1"])


def test_a_users_pipeline_is_typed_by_its_build_annotations(tmp_path, monkeypatch, capsys):
    (tmp_path / "schema_own_pipe.py").write_text(
        "def build(data_dir=None, max_tokens: int = 48, note: str | None = None, extra=None, **_):\n"
        "    raise AssertionError('refused before any build')\n")
    (tmp_path / "conf" / "pipeline").mkdir(parents=True)
    (tmp_path / "conf" / "pipeline" / "mine.yaml").write_text("_target_: schema_own_pipe.build\nmax_tokens: 48\n")
    monkeypatch.chdir(tmp_path)  # the CLI imports a pipeline module from the working directory
    base = ["plan", "--config-dir", "conf", "pipeline=mine", "method=unoptimized"]
    assert "pipeline.max_tokens='abc' is not an integer" in refused(capsys, [*base, "pipeline.max_tokens=abc"])
    assert "pipeline.note=5 is not text" in refused(capsys, [*base, "+pipeline.note=5"])
    assert "schema_own_pipe.build() takes max_tokens, note, extra" in refused(capsys, [*base, "+pipeline.zzz=1"])


@pytest.mark.parametrize("command, fix", [("run", "add -m to run one job per value: optimas run -m"),
                                          ("plan", "`optimas run -m ...` runs a sweep"),
                                          ("headroom", "scan one value at a time")])
def test_a_sweep_without_m_is_one_line(tmp_path, capsys, command, fix):
    line = refused(capsys, [command, "pipeline=toy_hint,toy_retriever", "method=unoptimized",
                            f"hydra.run.dir={tmp_path / 'run'}"])
    assert "pipeline=toy_hint,toy_retriever is a sweep over several values" in line and fix in line
    assert not (tmp_path / "run").exists()


def test_the_resume_hint_names_the_key_as_the_user_types_it(tmp_path):
    """method.lrf copies the lrf group: a refusal named method.lrf.min_steps, which Hydra does not take."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        before = compose(config_name="config", overrides=["pipeline=toy_hint", "method=optimas"])
        now = compose(config_name="config", overrides=["pipeline=toy_hint", "method=optimas", "lrf.min_steps=3"])
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(before, resolve=True))
    with pytest.raises(UserError, match=r"other lrf\.min_steps \(60 there, 3 now\) — resume with lrf\.min_steps=60 "):
        check_resume(str(tmp_path), now)


# -- the tables cover conf/ exactly ------------------------------------------------------------------
def every_option():
    for group in ("pipeline", "method", "lm", "lrf", "budget", "tracking", "experiment"):
        for option in options(group):
            yield f"{group}={option}"


@pytest.mark.parametrize("override", list(every_option()))
def test_every_shipped_option_passes(override):
    """Every key of every YAML in conf/ is in the tables, with a value they accept."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        check_values(compose(config_name="config", overrides=[override]))


@pytest.mark.parametrize("target", sorted(schema.PIPELINES))
def test_a_pipelines_table_is_its_build_signature(target):
    assert sorted(schema.PIPELINES[target]) == sorted(schema.build_parameters(target))


def test_enumerations_match_the_code_that_reads_them():
    from optimas_cli.devices import DTYPES
    from optimas_cli.lrf.collect import CHOICE_MODES
    from optimas_cli.lrf.train import TrainConfig
    from optimas_cli.methods.optimas import STAGE2_POOLS
    from optimas_cli.methods.sysdpo import VARIANTS
    from optimas_cli.optim.gate import RULES
    from optimas_cli.optim.loop import ADAPTATION_MODES
    from optimas_cli.optim.prompt import PROPOSERS, SOURCES
    from optimas_cli.optim.rollouts import SAMPLING
    from optimas_cli.optim.settings import CHOICE_SCALES, ChoiceSettings, WeightsSettings
    from optimas_pipelines.hotpotqa.system import RETRIEVERS
    from optimas_pipelines.synthetic.spec import INTERACTIONS, METRICS, SHAPES

    methods = schema.METHODS
    assert set(schema.DTYPE.choices) == {"auto", *DTYPES}
    assert set(schema.GATES.choices) == set(RULES) and set(schema.PROPOSERS.choices) == set(PROPOSERS)
    assert set(schema.SOURCES.choices) == set(SOURCES)
    assert set(schema.CHOICE_SCALES.choices) == set(CHOICE_SCALES)
    assert set(methods["optimas_cli.methods.optimas.Optimas"]["stage2_pool"].choices) == set(STAGE2_POOLS)
    assert set(methods["optimas_cli.methods.sysdpo.SysDPO"]["variant"].choices) == set(VARIANTS)
    assert set(methods["optimas_cli.methods.sysdpo.SysDPO"]["sampling"].choices) == set(SAMPLING)
    assert set(schema.PIPELINES["optimas_pipelines.hotpotqa.build"]["retriever"].choices) == set(RETRIEVERS)
    assert set(schema.PIPELINES["optimas_pipelines.synthetic.system.build"]["shape"].choices) == set(SHAPES)
    assert set(schema.PIPELINES["optimas_pipelines.synthetic.system.build"]["interaction"].choices) == set(INTERACTIONS)
    assert set(schema.PIPELINES["optimas_pipelines.synthetic.system.build"]["metric"].choices) == set(METRICS)
    assert set(methods["optimas_cli.methods.optimas.Optimas"]["adaptation"].choices) == set(ADAPTATION_MODES)
    assert set(schema.LRF["collect"]["choices"].choices) == set(CHOICE_MODES)
    assert set(schema.LRF["train"]) == {f.name for f in inspect.signature(TrainConfig).parameters.values()}
    assert set(schema.OPTIMIZER["choice"]) == set(inspect.signature(ChoiceSettings).parameters)
    assert set(schema.OPTIMIZER["weights"]) == set(inspect.signature(WeightsSettings).parameters)


# -- any bad value, anywhere ---------------------------------------------------------------------------
def leaves(prefix: str, node) -> list[tuple[str, kind.Spec]]:
    out = []
    for name, spec in node.items():
        if isinstance(spec, kind.Node):
            out += leaves(f"{prefix}.{name}", spec)
        elif not isinstance(spec, kind.CheckedBy) and not name.startswith("_"):
            out.append((f"{prefix}.{name}", spec))
    return out


def option_tables(group: str, table: dict, by: str) -> list[tuple[list[str], dict]]:
    """(the override choosing an option of `group`, its table) for every option the table types."""
    out = []
    for option in options(group):
        ref = OmegaConf.load(CONF_DIR / group / f"{option}.yaml").get(by)
        if ref in table:
            out.append(([f"{group}={option}"], table[ref]))
    return out


# Every key of every lm, lrf, method, pipeline and tracking option, with the overrides that compose it
# (lrf.lora and budget.weights are null in the default options: no key to set under them).
KEYS = [(base, key, spec)
        for base, group, node in [([], "lm", schema.LM), ([], "lrf", schema.LRF), ([], "budget", schema.BUDGET),
                                  *[(b, "method", n) for b, n in option_tables("method", schema.METHODS, "_target_")],
                                  *[(b, "pipeline", n) for b, n in option_tables("pipeline", schema.PIPELINES, "_target_")],
                                  *[(b, "tracking", n) for b, n in option_tables("tracking", schema.TRACKING, "name")]]
        for key, spec in leaves(group, node) if not key.startswith(("lrf.lora.", "budget.weights."))]
KEYS.append(([], "proposer", schema.SOURCES))
RESERVED = {"true", "false", "null", "nan", "inf", "infinity"}  # words Hydra reads as something else
WORDS = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True).filter(lambda w: w not in RESERVED)


@st.composite
def bad_override(draw) -> list[str]:
    base, key, spec = draw(st.sampled_from(KEYS))
    if isinstance(spec, kind.Integer):
        candidates = [WORDS, st.floats(0.5, 1e6).filter(lambda x: not x.is_integer()).map(lambda x: f"{x!r}")]
        if spec.at_least is not None:
            candidates.append(st.integers(-10**6, spec.at_least - 1).map(str))
        if spec.at_most is not None:
            candidates.append(st.integers(spec.at_most + 1, spec.at_most + 10**6).map(str))
    elif isinstance(spec, kind.Number):
        candidates = [WORDS]
        low = spec.above if spec.above is not None else spec.at_least
        if low is not None:
            candidates.append(st.integers(-10**6, int(low) - 1).map(str))
    elif isinstance(spec, kind.OneOf):
        candidates = [WORDS.filter(lambda w: w not in spec.choices)]
    elif isinstance(spec, kind.Flag):
        candidates = [WORDS, st.integers().map(str)]
    else:  # text, lists, mappings: a number is none of them
        candidates = [st.integers(-10**6, 10**6).map(str)]
    if not spec.null:
        candidates.append(st.just("null"))
    value = draw(st.one_of(*candidates))
    typo = draw(st.booleans()) and draw(WORDS)  # or a key its group does not take
    # ++ sets a key whether or not the composed config holds it (lm.retry_max_seconds is in no YAML)
    return [*base, f"+{key.rpartition('.')[0] or 'lm'}.zz{typo}=1" if typo else f"++{key}={value}"]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=bad_override())
def test_any_bad_value_is_one_line_never_a_traceback(capsys, overrides):
    line = refused(capsys, ["plan", *TOY, *overrides])
    key = overrides[-1].lstrip("+").split("=")[0]
    assert re.search(rf"\b{re.escape(key)}\b", line), line
