"""STaRK-Prime as a compound system: two LM scorers feed a weighted aggregator (paper Section 5)."""
from __future__ import annotations

import re

from optimas_cli.system import CompoundSystem, Pipeline, SingleLLMTask
from optimas_pipelines.stark_prime.components import ScoreAggregator, relation_scorer, text_scorer
from optimas_pipelines.stark_prime.data import load_stark_prime
from optimas_pipelines.stark_prime.metric import MRR
from optimas_pipelines.stark_prime.score_parsing import ParseCounts

SYSTEM_INPUTS = ("question", "relation_info", "text_info", "emb_scores")

SINGLE_LLM_PROMPT = (
    "Answer the biomedical question with the name of the one entity of the PrimeKG knowledge graph (a disease, "
    "drug, gene/protein, pathway, phenotype, anatomy, biological process, molecular function, cellular "
    "component or exposure) that best answers it. Reply with the name only.\n\nQuestion: {question}"
)
_LEAD = re.compile(r"^\s*(?:[-*•]|\d+[.)]|answer\s*:|name\s*:|entity\s*:)\s*", re.IGNORECASE)


def single_llm_prompt(example: dict) -> list[dict]:
    return [{"role": "user", "content": SINGLE_LLM_PROMPT.format(question=example["question"])}]


def parse_entity_name(text: str) -> dict:
    """The first non-empty line, without list markers, an 'Answer:' lead, quotes or a final period.

    The metric matches this name against the query's candidates to rank them (see metric.py).
    """
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return {"answer_name": _LEAD.sub("", line).strip().strip("\"'`*").rstrip(".").strip()}


def build(
    data_dir=None, *, kb_dir=None, candidates_file=None, emb_dir=None, skb_root=None, cache_dir=None,
    train_size: int | None = 250, val_size: int | None = 25, test_size: int | None = 100,
    seed: int = 42, info_chars: int = 1024, scorer_max_tokens: int = 128,
) -> Pipeline:
    splits, info = load_stark_prime(
        data_dir, train_size=train_size, val_size=val_size, test_size=test_size, kb_dir=kb_dir,
        candidates_file=candidates_file, emb_dir=emb_dir, skb_root=skb_root, cache_dir=cache_dir,
        seed=seed, info_chars=info_chars,
    )
    counts = ParseCounts()
    system = CompoundSystem(
        [relation_scorer(counts, scorer_max_tokens), text_scorer(counts, scorer_max_tokens), ScoreAggregator()],
        inputs=SYSTEM_INPUTS,
        outputs=("final_scores",),
    )
    info["score_parsing"] = counts.counts  # live: filled in as the scorers run
    return Pipeline(
        name="stark_prime",
        system=system,
        splits=splits,
        metric=MRR,
        single_llm=SingleLLMTask(prompt=single_llm_prompt, parse=parse_entity_name, max_tokens=32),
        info=info,
    )
