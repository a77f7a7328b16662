"""HotpotQA as the paper's five-component system, and `build`, which the runner instantiates.

    question -> question_rewriter -> rewritten_query -> info_extractor -> search_keywords
             -> retriever (k) -> retrieve_content -> hint_generator -> hints -> answer_generator -> answer

Four prompt components and a retriever whose configuration is a global choice of k in {1, 5, 10, 25}.
"""
from __future__ import annotations

from optimas_cli.errors import UserError
from optimas_cli.system import Component, CompoundSystem, ConfigKind, Metric, Pipeline, SingleLLMTask
from optimas_cli.system.parsing import lenient
from optimas_cli.system.prompt_component import PromptComponent
from optimas_pipelines.hotpotqa import prompts
from optimas_pipelines.hotpotqa.context_budget import PassageBudget
from optimas_pipelines.hotpotqa.data import (
    DEFAULT_TRAIN_SIZE,
    DEFAULT_VAL_SIZE,
    load_rows,
    make_splits,
    pooled_paragraphs,
)
from optimas_pipelines.hotpotqa.metric import answer_f1
from optimas_pipelines.hotpotqa.passage_search import BM25PassageIndex, Passage, PassageSearch

K_CHOICES = (1, 5, 10, 25)
RETRIEVERS = ("bm25", "colbert")


class PassageRetriever(Component):
    def __init__(self, search: PassageSearch, default_k: int):
        super().__init__(
            "retriever",
            "Retrieves the k passages that best match the search keywords.",
            inputs=("search_keywords",),
            outputs=("retrieve_content",),
            kind=ConfigKind.CHOICE,
            default=default_k,
            choices=K_CHOICES,
            # MiniLM reads 256 tokens: the passages themselves would show only the first one or two, the
            # same for every k. Their count (k) and titles are what sets one k's output apart.
            reward_view={"retrieve_content": "titled_lines"},
        )
        self.search = search

    def forward(self, inputs: list[dict], value, ctx) -> list[dict]:
        hits = self.search.search([str(x["search_keywords"] or "") for x in inputs], int(value))
        return [{"retrieve_content": "\n".join(p.render() for p in passages)} for passages in hits]


def _candidates(name: str) -> dict:
    """What the pool proposer may try for a component besides the LM's own proposals."""
    return {"alternatives": prompts.ALTERNATIVES[name], "format_constraints": prompts.FORMAT_CONSTRAINTS[name]}


def components(search: PassageSearch, k: int, context_tokens: int | None = None) -> list[Component]:
    return [
        PromptComponent(
            "question_rewriter", "Rephrases the question to make it clear and self-contained.",
            inputs={"question": "Question"}, output="rewritten_query",
            instruction=prompts.REWRITER_INSTRUCTION, reply_format=prompts.REWRITER_FORMAT,
            parse=prompts.parse_rewrite, max_tokens=64, **_candidates("question_rewriter"),
        ),
        PromptComponent(
            "info_extractor", "Extracts search keywords from the query to retrieve relevant content.",
            inputs={"rewritten_query": "Query"}, output="search_keywords",
            instruction=prompts.EXTRACTOR_INSTRUCTION, reply_format=prompts.EXTRACTOR_FORMAT,
            parse=prompts.parse_keywords, max_tokens=32, **_candidates("info_extractor"),
        ),
        PassageRetriever(search, k),
        PromptComponent(
            "hint_generator", "Generates useful hints for answering the query from the retrieved passages.",
            inputs={"rewritten_query": "Query", "retrieve_content": "Retrieved Information"}, output="hints",
            instruction=prompts.HINT_INSTRUCTION, reply_format=prompts.HINT_FORMAT,
            parse=prompts.parse_hints, max_tokens=96, fit=PassageBudget("retrieve_content", context_tokens),
            **_candidates("hint_generator"),
        ),
        PromptComponent(
            "answer_generator", "Given the hints, answers the query with a short answer.",
            inputs={"rewritten_query": "Query", "hints": "Hints"}, output="answer",
            instruction=prompts.ANSWER_INSTRUCTION, reply_format=prompts.ANSWER_FORMAT,
            parse=prompts.parse_short_answer, max_tokens=32, **_candidates("answer_generator"),
        ),
    ]


def build(
    data_dir: str | None = None,
    k: int = 5,
    retriever: str = "bm25",
    colbert_url: str | None = None,
    train_size: int = DEFAULT_TRAIN_SIZE,
    val_size: int = DEFAULT_VAL_SIZE,
    test_size: int | None = None,
    seed: int = 0,
    context_tokens: int | None = 1024,
) -> Pipeline:
    """The HotpotQA pipeline. retriever=bm25 searches the pooled paragraphs offline; retriever=colbert
    queries the ColBERTv2 server at `colbert_url` (the paper's setting, online). `context_tokens`
    caps the retrieved passages in the hint generator's prompt (None: no cap)."""
    if context_tokens is not None and int(context_tokens) < 1:
        raise UserError(f"HotpotQA context_tokens={context_tokens} must be positive", "set a token count, or null")
    if k not in K_CHOICES:
        raise UserError(f"HotpotQA retriever k={k} is not one of {K_CHOICES}", f"set k to one of {K_CHOICES}")
    if retriever not in RETRIEVERS:
        raise UserError(f"unknown HotpotQA retriever {retriever!r}", f"use one of {RETRIEVERS}")
    rows = load_rows(data_dir, seed=seed, min_pool=train_size + val_size)
    splits = make_splits(rows, train_size, val_size, test_size)
    info: dict = {"data_source": rows.source, "train_val_pool": len(rows.pool),
                  "test_questions_removed_from_pool": rows.test_overlap_removed, "retriever": retriever}
    if retriever == "colbert":
        if not colbert_url:
            raise UserError("retriever=colbert needs a server", "set colbert_url=http://host:port/wiki17_abstracts")
        from optimas_pipelines.hotpotqa.colbert import ColBERTv2Search

        search: PassageSearch = ColBERTv2Search(colbert_url)
        info["colbert_url"] = colbert_url
    else:
        passages = [Passage(t, text) for t, text in pooled_paragraphs(rows.test + rows.pool)]
        index = BM25PassageIndex.load_or_build(passages)
        search = index
        info["corpus_paragraphs"] = len(passages)
        info["bm25_index"] = "loaded from cache" if index.build_seconds is None else f"built in {index.build_seconds:.1f}s"
    system = CompoundSystem(components(search, k, context_tokens), inputs=("question",), outputs=("answer",))
    single_llm = SingleLLMTask(
        prompt=prompts.single_llm_messages,
        parse=lambda text: {"answer": lenient(prompts.parse_short_answer)(text)},
        max_tokens=32,
    )
    return Pipeline("hotpotqa", system, splits, Metric("f1", answer_f1), single_llm=single_llm, info=info)
