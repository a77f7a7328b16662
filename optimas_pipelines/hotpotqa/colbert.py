"""The paper's online retriever: a ColBERTv2 server over Wikipedia abstracts, queried over HTTP.

The server (the one DSPy's `ColBERTv2` client talks to) answers GET `<url>?query=...&k=...` with
JSON `{"topk": [{"text": "Title | abstract", "long_text": ..., "score": ...}, ...]}`.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import requests

from optimas_cli.errors import UserError
from optimas_pipelines.hotpotqa.passage_search import Passage


def _passage(text: str) -> Passage:
    title, sep, body = text.partition(" | ")
    return Passage(title.strip(), body.strip()) if sep else Passage("", text.strip())


class ColBERTv2Search:
    def __init__(self, url: str, timeout: float = 30.0, max_concurrency: int = 8):
        if not url.startswith(("http://", "https://")):
            raise UserError(f"colbert_url {url!r} is not an http(s) URL", "pass e.g. colbert_url=http://host:port/wiki17_abstracts")
        self.url, self.timeout, self.max_concurrency = url, timeout, max_concurrency
        self._memo: dict[tuple[str, int], list[Passage]] = {}  # the same keywords recur across repeats

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(lambda q: self._search_one(q, k), queries))

    def _search_one(self, query: str, k: int) -> list[Passage]:
        if not query.strip():
            return []
        if (query, k) in self._memo:
            return self._memo[(query, k)]
        try:
            response = requests.get(self.url, params={"query": query, "k": k}, timeout=self.timeout)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise UserError(f"the ColBERT server at {self.url} failed: {exc}",
                            "check colbert_url and that the server is up, or use retriever=bm25") from None
        try:
            passages = [_passage(hit.get("long_text") or hit["text"]) for hit in response.json()["topk"][:k]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # bad JSON is a ValueError too
            raise UserError(f"the ColBERT server at {self.url} did not answer with a 'topk' list ({exc!r})",
                            "point colbert_url at a ColBERTv2 search endpoint") from None
        self._memo[(query, k)] = passages
        return passages
