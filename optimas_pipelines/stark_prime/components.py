"""The paper's three STaRK-Prime components: relation scorer, text scorer (prompts), aggregator (choice)."""
from __future__ import annotations

from typing import ClassVar

from optimas_cli.system import Component, ConfigKind
from optimas_pipelines.stark_prime.score_parsing import N_SCORES, NEUTRAL_SCORE, ParseCounts, parse_scores

RELATION_PROMPT = (
    "You are given a biomedical question and five candidate entities from a knowledge graph, each with its "
    "relations to other entities. Give each candidate a relevance score between 0 and 1 for how well its "
    "relations match what the question asks for."
)
TEXT_PROMPT = (
    "You are given a biomedical question and five candidate entities from a knowledge graph, each with its "
    "properties (descriptions and details). Give each candidate a relevance score between 0 and 1 for how well "
    "its properties meet the requirements stated in the question."
)
# Fixed, not part of the optimizable prompt: a rewritten instruction must not lose the answer format.
ANSWER_FORMAT = 'Answer with JSON only, one score per candidate: {"1": s1, "2": s2, "3": s3, "4": s4, "5": s5}'


class CandidateScorer(Component):
    """Scores the five candidates from one kind of information (a prompt component)."""

    calls_lm: ClassVar[bool] = True

    def __init__(self, name: str, description: str, info_field: str, info_label: str, output_field: str,
                 default_prompt: str, counts: ParseCounts, max_tokens: int):
        super().__init__(name, description, inputs=("question", info_field), outputs=(output_field,),
                         kind=ConfigKind.PROMPT, default=default_prompt)
        self.info_field, self.info_label, self.output_field = info_field, info_label, output_field
        self.counts, self.max_tokens = counts, max_tokens

    def messages(self, x: dict, instruction: str) -> list[dict]:
        user = f"Query: {x['question']}\n\n{self.info_label}:\n{x[self.info_field]}\n\n{ANSWER_FORMAT}"
        return [{"role": "system", "content": instruction}, {"role": "user", "content": user}]

    def forward(self, inputs, value, ctx):
        texts = ctx.complete(self.name, [self.messages(x, value) for x in inputs], max_tokens=self.max_tokens)
        out = []
        for text in texts:
            scores = parse_scores(text)
            self.counts.record(self.name, scores is not None)
            out.append({self.output_field: scores if scores is not None else [NEUTRAL_SCORE] * N_SCORES})
        return out


def relation_scorer(counts: ParseCounts, max_tokens: int) -> CandidateScorer:
    return CandidateScorer(
        "relation_scorer", "Scores each of the five candidates by how well its relations match the question.",
        "relation_info", "Relational information of the five candidates", "relation_scores",
        RELATION_PROMPT, counts, max_tokens,
    )


def text_scorer(counts: ParseCounts, max_tokens: int) -> CandidateScorer:
    return CandidateScorer(
        "text_scorer", "Scores each of the five candidates by how well its properties match the question.",
        "text_info", "Property information of the five candidates", "text_scores",
        TEXT_PROMPT, counts, max_tokens,
    )


WEIGHT_VALUES = (0.1, 1.0)  # the paper's search space for each weight


class ScoreAggregator(Component):
    """final = relation_weight * relation + text_weight * text + embedding similarity (a global choice)."""

    def __init__(self):
        super().__init__(
            "aggregator",
            "Combines the relation, text and embedding scores of the five candidates into the final ranking "
            "scores, weighting the relational and textual evidence.",
            inputs=("question", "emb_scores", "relation_scores", "text_scores"),
            outputs=("final_scores",),
            kind=ConfigKind.CHOICE,
            default={"relation_weight": 0.1, "text_weight": 0.1},
            choices=tuple({"relation_weight": r, "text_weight": t} for r in WEIGHT_VALUES for t in WEIGHT_VALUES),
        )

    def forward(self, inputs, value, ctx):
        rw, tw = float(value["relation_weight"]), float(value["text_weight"])
        return [
            {"final_scores": [round(rw * r + tw * t + e, 4)
                              for r, t, e in zip(x["relation_scores"], x["text_scores"], x["emb_scores"], strict=True)]}
            for x in inputs
        ]
