"""PrimeKG through the `stark-qa` package (online users): the paper's knowledge base and embeddings.

`load_skb('prime')` downloads the processed PrimeKG (hub dataset snap-stanford/stark) on first use.
The paper's candidate selection uses the precomputed ada-002 vectors that STaRK publishes
(`python emb_download.py --dataset prime` in the STaRK repository writes
emb/prime/text-embedding-ada-002/{query/query_emb_dict.pt, doc/candidate_emb_dict.pt}); point
`emb_dir` at that text-embedding-ada-002 folder. Without it, TF-IDF similarity stands in.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from optimas_cli.errors import DataError, UserError
from optimas_pipelines.stark_prime.lexical import TfidfIndex
from optimas_pipelines.stark_prime.queries import Query

log = logging.getLogger(__name__)


def stark_qa_installed() -> bool:
    try:
        import stark_qa  # noqa: F401
    except ImportError:
        return False
    return True


class StarkPrimeKnowledgeBase:
    def __init__(self, skb_root: str | None = None, emb_dir: str | None = None):
        try:
            from stark_qa import load_skb
        except ImportError:
            raise UserError("the stark-qa package is not installed", "pip install stark-qa") from None
        try:
            # An explicit root: some stark-qa versions cannot join paths onto root=None.
            root = str(Path(skb_root).expanduser()) if skb_root else str(Path.home() / ".cache" / "optimas" / "stark")
            self.skb = load_skb("prime", root=root, download_processed=True)
        except Exception as exc:  # hub or unpacking errors: say what to do instead of a traceback
            raise DataError(
                f"stark-qa could not load the PrimeKG knowledge base ({type(exc).__name__}: {exc})",
                "run once online (it downloads snap-stanford/stark skb/primekg/processed.zip), "
                "or set kb_dir / candidates_file (see optimas_pipelines/stark_prime/README.md)",
            ) from None
        self.node_ids = [int(i) for i in self.skb.candidate_ids]
        self._ids = set(self.node_ids)
        self._emb = self._load_embeddings(Path(emb_dir).expanduser()) if emb_dir else None
        self._tfidf: TfidfIndex | None = None
        self.similarity_kind = "ada-002" if self._emb else "tfidf"

    def has(self, node_id: int) -> bool:
        return node_id in self._ids

    def name(self, node_id: int) -> str:
        return str(self.skb[node_id].name)

    def relation_info(self, node_id: int) -> str:
        node = self.skb[node_id]  # the layout of the paper's GetRelationInfo tool
        return f"- name: {node.name}\n- type: {node.type}\n" + self.skb.get_rel_info(node_id)

    def text_info(self, node_id: int) -> str:
        return self.skb.get_doc_info(node_id, add_rel=False, compact=False)

    def similarities(self, query: Query) -> np.ndarray:
        if self._emb:
            query_emb, node_matrix = self._emb
            if query.query_id not in query_emb:
                raise DataError(f"no ada-002 vector for query {query.query_id} in emb_dir", "re-download the embeddings")
            return node_matrix @ query_emb[query.query_id]
        if self._tfidf is None:
            log.warning("no emb_dir: indexing %d PrimeKG nodes with TF-IDF (slow, once; cached after)", len(self.node_ids))
            self._tfidf = TfidfIndex([self.skb.get_doc_info(i, add_rel=True, compact=True) for i in self.node_ids])
        return self._tfidf.scores(query.text)

    def _load_embeddings(self, emb_dir: Path) -> tuple[dict[int, np.ndarray], np.ndarray]:
        import torch

        query_path, node_path = emb_dir / "query" / "query_emb_dict.pt", emb_dir / "doc" / "candidate_emb_dict.pt"
        for p in (query_path, node_path):
            if not p.exists():
                raise DataError(f"{p} not found", "point emb_dir at STaRK's emb/prime/text-embedding-ada-002 folder")
        query_dict = torch.load(query_path, map_location="cpu")
        node_dict = torch.load(node_path, map_location="cpu")
        query_emb = {int(k): v.reshape(-1).double().numpy() for k, v in query_dict.items()}
        node_matrix = np.stack([node_dict[i].reshape(-1).double().numpy() for i in self.node_ids])
        return query_emb, node_matrix
