"""TF-IDF cosine similarity: the vector similarity used when a knowledge base ships no embeddings.

The paper selects candidates with OpenAI ada-002 embeddings; a knowledge base without them still
needs *some* vector-similarity retriever, and sparse TF-IDF vectors need no model and no network.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")
# Words every query and document share; dropping them keeps the scores on the content words.
_STOPWORDS = frozenset(
    "a an and are as at be by can could do does for from has have how i in is it its me my of on or that the "
    "their there these this those to what which who whose with would any also both other name type details "
    "relations source".split()
)


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]


class TfidfIndex:
    """Documents as L2-normalised TF-IDF vectors held in an inverted index (no dense matrix)."""

    def __init__(self, documents: list[str]):
        self.size = len(documents)
        counts = [Counter(tokens(d)) for d in documents]
        doc_freq = Counter(t for c in counts for t in c)
        # Smoothed idf, as scikit-learn's default: every term keeps a positive weight.
        self.idf = {t: math.log((1 + self.size) / (1 + df)) + 1.0 for t, df in doc_freq.items()}
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i, c in enumerate(counts):
            weights = {t: (1 + math.log(n)) * self.idf[t] for t, n in c.items()}
            norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
            for t, w in weights.items():
                self.postings[t].append((i, w / norm))

    def scores(self, query: str) -> np.ndarray:
        """Cosine similarity of the query with every document (0 where no term is shared)."""
        c = Counter(t for t in tokens(query) if t in self.idf)
        weights = {t: (1 + math.log(n)) * self.idf[t] for t, n in c.items()}
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        out = np.zeros(self.size, dtype=np.float64)
        for t, w in weights.items():
            for i, dw in self.postings[t]:
                out[i] += dw * w / norm
        return out
