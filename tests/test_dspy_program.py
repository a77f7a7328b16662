"""pipeline=dspy: a user's DSPy program (examples/dspy_program: a retriever program, a branching one) as the
compound system; its predictors as prompt components through the run's LM layer; the wiring from dry runs;
what cannot be mapped refused in one line; the optimized instructions back in the program (export --program,
api.load(...).program()); and, with the embedded model, DSPy running the saved program gives our outputs."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import dspy
import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import UserError
from optimas_cli.flows.setup import build_budget, build_method, build_pipeline
from optimas_cli.system import ConfigKind, RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.dspy_program import build
from tests.fakes import ScriptedLM
from tests.test_lrf_tiny_backbone import build_tiny_bert
from tests.test_methods_gepa import GEPA_ASKS
from tests.test_methods_toys import optimize_and_test, scripted_reply

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "dspy_program"
GOOD = "Answer with the one word of the context that answers the question."
OUTPUT_FIELD = re.compile(r"starting with the field `\[\[ ## (\w+) ## \]\]`")


@pytest.fixture(autouse=True)
def programs_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def gold() -> dict:
    from corpus import QUESTIONS

    return dict(QUESTIONS)


def program_lm() -> ScriptedLM:
    """The example programs' predictors, and the optimizers' own calls. The query writer repeats the question; an
    answerer names the gold answer when its instructions are GOOD (or, sampled, on odd samples), else does not know."""
    answers = gold()

    def answer(req):
        system, user = req.messages[0]["content"], req.messages[-1]["content"]
        field = OUTPUT_FIELD.search(user)
        question = re.search(r"\[\[ ## question ## \]\]\n(.*)", user)
        if field and question and question.group(1) in answers:
            value = {"query": question.group(1), "topic": "person" if "born" in user or "profession" in user else "place",
                     "answer": answers[question.group(1)] if GOOD in system or req.sample_index % 2 else "not sure"}
            return f"[[ ## {field.group(1)} ## ]]\n{value[field.group(1)]}\n\n[[ ## completed ## ]]"
        if GEPA_ASKS in user:
            return f"```\n{GOOD}\n```"
        reply = scripted_reply(req, GOOD)
        assert reply is not None, f"unexpected request: {user[:300]}"
        return reply

    return ScriptedLM(answer)


# -- the program as components ----------------------------------------------------------------------
def test_a_retriever_program_becomes_code_and_prompt_components_wired_in_call_order():
    pipeline = build(program="rag:program")
    system = pipeline.system
    assert system.order == ["generate_query_inputs", "generate_query", "answer_inputs", "answer", "program_output"]
    assert {n: c.kind for n, c in system.components.items() if c.kind is ConfigKind.PROMPT} == {
        "generate_query": ConfigKind.PROMPT, "answer": ConfigKind.PROMPT}
    assert system.default_config()["answer"] == "Given the fields `context`, `question`, produce the fields `answer`."
    assert (system.inputs, system.outputs) == (("question",), ("context", "answer"))
    assert system.components["answer"].inputs == ("answer__context", "answer__question")
    assert system.downstream("generate_query") == ["answer_inputs", "answer", "program_output"]
    assert (len(pipeline.splits.train), len(pipeline.splits.val), len(pipeline.splits.test)) == (8, 4, 4)

    lm = program_lm()
    good = system.default_config().replace("answer", GOOD)
    ctx = RunContext(ledger=RunLedger(len(system)), lm=lm)
    (traj,) = system.run(pipeline.splits.test[-1:], good, ctx)
    # the retriever ran on the query the first predictor wrote, and its passages are the answerer's context
    query = traj.steps["generate_query"]["outputs"]["generate_query__query"]
    assert query == "Which country is Vienna the capital of?"
    assert traj.steps["answer"]["inputs"]["answer__context"][0].startswith("Vienna is the capital of Austria")
    assert traj.final(system.outputs)["answer"] == "Austria"
    assert {component for component, _ in lm.requests} == {"generate_query", "answer"}  # the run's LM, per component
    assert evaluate(pipeline, good, pipeline.splits.test, ctx)["mean"] == 1.0
    assert evaluate(pipeline, system.default_config(), pipeline.splits.test, ctx)["mean"] == 0.0


def test_a_branch_runs_only_the_predictor_its_condition_picks():
    pipeline = build(program="branch:program")
    system = pipeline.system
    assert pipeline.info["call_order"] == ["route", "person", "place"]  # place: never on a dry run, by declaration
    examples = [ex for ex in pipeline.splits.train if ex["question"].startswith(("Where was", "Which river"))][:4]
    trajs = system.run(examples, system.default_config().replace("person", GOOD).replace("place", GOOD),
                       RunContext(ledger=RunLedger(len(system)), lm=program_lm()))
    for ex, traj in zip(examples, trajs, strict=True):
        person = ex["question"].startswith("Where was")
        assert (traj.steps["person"]["skipped"], traj.steps["place"]["skipped"]) == (not person, person)
        assert traj.final(system.outputs) == {"answer": ex["answer"]}


def test_a_reply_that_does_not_parse_stops_the_program_there_as_dspy_does():
    pipeline = build(program="rag:program")
    system = pipeline.system
    ctx = RunContext(ledger=RunLedger(len(system)), lm=ScriptedLM("no fields here"))
    (traj,) = system.run(pipeline.splits.test[:1], system.default_config(), ctx)
    assert traj.steps["generate_query"]["outputs"] == {"generate_query__query": None}
    assert traj.steps["answer"]["skipped"] and traj.final(system.outputs) == {"context": None, "answer": None}
    events = ctx.ledger.to_dict()["by_phase"]["run"]["events"]
    assert events["generate_query"] == {"parse_failures": 1} and "answer_inputs" not in events


@pytest.mark.parametrize(("program", "refusal"), [
    ("agent", "uses dspy.ReAct (tool calls in a loop) at 'self.agent', which pipeline=dspy cannot map"),
    ("loop", "predictor 'hop' is called twice in one run of the program"),
    ("fanout", "predictor 'ask' is called from another thread (dspy.Parallel"),
    ("direct", "the program calls the LM outside its named predictors"),
    ("tools", "has the tool field 'tools': tool calling is not supported"),
    ("swapped", "calls its predictors in different orders on different training examples (first -> second / "
                "second -> first)"),
])
def test_what_cannot_be_mapped_is_refused_in_one_line_naming_it(program, refusal):
    with pytest.raises(UserError) as err:
        build(program=f"tests.dspy_programs:{program}")
    assert refusal in str(err.value) and "\n" not in str(err.value)


def test_a_missing_or_misspelled_program_is_one_line():
    with pytest.raises(UserError, match="pipeline=dspy needs the program to optimize — add program="):
        build()
    with pytest.raises(UserError, match=r"rag has no 'programme' \(pipeline.program\)"):
        build(program="rag:programme")


# -- the methods on a DSPy program ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


def composed(method: str, tiny_bert) -> tuple:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["pipeline=dspy", "program=rag:program", f"method={method}", "budget=smoke",
                                           f"lrf.backbone={tiny_bert}", "lrf.max_length=120", "lrf.min_steps=20"])
    return build_pipeline(cfg), build_method(cfg, build_budget(cfg))


@pytest.mark.parametrize("method", ["dspy", "gepa"])
def test_dspy_and_gepa_find_the_instruction_that_answers(method, tiny_bert, tmp_path):
    pipeline, optimizer = composed(method, tiny_bert)
    outcome, test, _ = optimize_and_test(optimizer, pipeline, pipeline.splits, program_lm(), tmp_path)
    assert GOOD in outcome.config["answer"] and test["mean"] == 1.0
    # the optimized instructions go back into the user's program, which DSPy saves and loads as its own
    pipeline.to_program(outcome.config).save(str(tmp_path / "program.json"))
    sys.modules.pop("rag", None)
    import rag

    fresh = rag.RAG()
    fresh.load(str(tmp_path / "program.json"))
    assert fresh.answer.signature.instructions == outcome.config["answer"]
    assert fresh.generate_query.signature.instructions == outcome.config["generate_query"]


def test_optimas_collects_pairs_and_runs_its_loop_on_the_program(tiny_bert, tmp_path):
    pipeline, optimizer = composed("optimas", tiny_bert)
    outcome, test, ctx = optimize_and_test(optimizer, pipeline, pipeline.splits, program_lm(), tmp_path)
    pairs = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert {p["component"] for p in pairs} >= {"answer"}  # odd samples answer, even ones do not: pairs to learn from
    assert all(e.component in ("generate_query", "answer") for e in outcome.history)  # what the loop judged
    assert set(outcome.config) == set(pipeline.system.components)
    assert ctx.ledger.to_dict()["by_phase"]["local_optimization"]["runs"] > 0


def test_optimas_export_writes_the_program_dspy_loads_and_the_api_returns_it(tmp_path, monkeypatch):
    import optimas_cli.api as optimas
    from optimas_cli.flows.export import export_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")  # the mock API model needs none, litellm checks
    reply = "[[ ## query ## ]]\nVienna\n\n[[ ## answer ## ]]\nAustria\n\n[[ ## completed ## ]]"
    result = optimas.run("pipeline=dspy", "program=rag:program", "method=unoptimized", "repeats=1", "budget=smoke",
                         "lm=openai", f"+lm.mock_response='{reply}'", "lm.cache=false", folder=tmp_path / "run")
    assert result.results["pipeline"] == "dspy_rag" and result.test["mean"] == 0.25  # Vienna's is the 4th question
    assert export_main([str(result.folder), "--program", str(tmp_path / "optimized.json")]) == 0
    import rag

    saved, returned = rag.RAG(), optimas.load(result.folder).program()
    saved.load(str(tmp_path / "optimized.json"))
    for program in (saved, returned):
        assert [(n, p.signature.instructions) for n, p in program.named_predictors()] == [
            ("generate_query", "Given the fields `question`, produce the fields `query`."),
            ("answer", "Given the fields `context`, `question`, produce the fields `answer`.")]
    assert export_main([str(result.folder), "--program", str(tmp_path / "optimized.yaml")]) == 2


# -- the round trip, with the embedded model ----------------------------------------------------------
class Recording:
    """The run's LM client, keeping every (messages, completion) it served."""

    def __init__(self, lm):
        self.lm, self.calls = lm, []

    def complete(self, requests, component="-", phase="-"):
        responses = self.lm.complete(requests, component=component, phase=phase)
        self.calls += [(r.messages, response.texts[0]) for r, response in zip(requests, responses, strict=True)]
        return responses


def as_set(calls) -> list:
    return sorted(json.dumps([messages, text]) for messages, text in calls)


@pytest.mark.real_model
@pytest.mark.slow  # two minutes of SmolLM2 each on a CPU (make test-slow); the tests above run programs on tiny models
@pytest.mark.parametrize("program", ["rag", "branch"])
def test_dspy_running_the_saved_program_gives_the_outputs_we_evaluated(program, tmp_path):
    """Greedy SmolLM2-135M: our evaluation of an optimized configuration, and DSPy's own run of the program it
    saves (its own LM client, litellm to the embedded provider), send the same prompts, get the same completions
    and end with the same answers."""
    from dspy.utils.exceptions import AdapterParseError

    from optimas_cli.lm.client import LMClient
    from optimas_cli.lm.local.provider import register_provider

    tokens = 96
    pipeline = build(program=f"{program}:program", max_tokens=tokens)
    config = pipeline.system.default_config()
    for name in ("answer", "person", "place"):
        config = config.replace(name, GOOD) if name in config else config
    examples = pipeline.splits.train[:3]
    lm = Recording(LMClient(model="local/smollm2-135m-instruct", temperature=0.0, max_tokens=tokens, cache=False))
    ours = [t.final(pipeline.system.outputs)["answer"]
            for t in pipeline.system.run(examples, config, RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm))]

    pipeline.to_program(config).save(str(tmp_path / "program.json"))
    sys.modules.pop(program, None)
    user_program = __import__(program).program
    user_program.load(str(tmp_path / "program.json"))
    register_provider()
    native = dspy.LM("local/smollm2-135m-instruct", temperature=0.0, max_tokens=tokens, cache=False)
    theirs = []
    with dspy.context(lm=native):
        for example in examples:
            try:
                theirs.append(user_program(question=example["question"]).answer)
            except AdapterParseError:  # where DSPy raises, our component counts a parse failure and goes on with None
                theirs.append(None)
    assert as_set(lm.calls) == as_set((h["messages"], h["outputs"][0]) for h in native.history)
    assert ours == theirs
