"""A knowledge base read from a local folder (`kb_dir`), in the format of README.md in this package.

    nodes.jsonl      one node a line: {"id": int, "name": str, "type": str,
                     "text": str (optional), "source": str (optional),
                     "relations": {"<relation type>": [node id, ...]} (optional)}
    embeddings.npz   optional: node_ids (N,), node_vectors (N, d), query_ids (Q,), query_vectors (Q, d);
                     similarity = dot product, as the official VSS retriever (normalise for cosine)

Relations are undirected, as in STaRK's PrimeKG (an edge listed on one end shows on both).
Without embeddings.npz, similarity is TF-IDF cosine over each node's name, type, text and relations.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

import numpy as np

from optimas_cli.data_files import read_jsonl, require_fields
from optimas_cli.errors import DataError
from optimas_pipelines.stark_prime.lexical import TfidfIndex
from optimas_pipelines.stark_prime.queries import Query

NODES_FILE = "nodes.jsonl"
EMBEDDINGS_FILE = "embeddings.npz"


def _validate_node(row: dict) -> None:
    require_fields(row, ("id", "name", "type"))
    if not isinstance(row["id"], int):
        raise ValueError(f"id must be an integer, got {row['id']!r}")
    relations = row.get("relations") or {}
    if not isinstance(relations, dict) or not all(
        isinstance(v, list) and all(isinstance(i, int) for i in v) for v in relations.values()
    ):
        raise ValueError("relations must map each relation type to a list of node ids")


def relation_text(name: str, node_type: str, relations: dict[str, dict[str, list[str]]]) -> str:
    """The one-hop relational information in the layout of STaRK's PrimeSKB.get_rel_info."""
    doc = f"- name: {name}\n- type: {node_type}\n"
    if relations:
        doc += "- relations:\n"
        for rel, by_type in relations.items():
            groups = "".join(f"{t}: ({', '.join(names)})," for t, names in by_type.items())
            doc += f"  {rel.replace(' ', '_')}: {{{groups}}}\n"
    return doc


def property_text(name: str, node_type: str, source: str | None, text: str) -> str:
    """The textual information in the layout of STaRK's PrimeSKB.get_doc_info(add_rel=False)."""
    doc = f"- name: {name}\n- type: {node_type}\n"
    if source:
        doc += f"- source: {source}\n"
    if text.strip():
        doc += "- details:\n" + "".join(f"  {line}\n" for line in text.strip().splitlines())
    return doc


class LocalKnowledgeBase:
    def __init__(self, kb_dir: str | Path):
        self.root = Path(kb_dir).expanduser()
        nodes_path = self.root / NODES_FILE
        if not nodes_path.exists():
            raise DataError(
                f"knowledge-base folder {self.root} has no {NODES_FILE}",
                "point kb_dir at a folder in the format of optimas_pipelines/stark_prime/README.md",
            )
        self.nodes = {row["id"]: row for row in read_jsonl(nodes_path, _validate_node)}
        self.node_ids = sorted(self.nodes)
        self.neighbors: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        for nid, row in self.nodes.items():
            for rel, targets in (row.get("relations") or {}).items():
                for t in targets:
                    if t not in self.nodes:
                        raise DataError(f"{nodes_path}: node {nid} relates ({rel}) to unknown node {t}", "add that node")
                    self.neighbors[nid][rel].add(t)
                    self.neighbors[t][rel].add(nid)
        self._vectors = self._read_embeddings()
        self._tfidf: TfidfIndex | None = None
        self.similarity_kind = "embeddings" if self._vectors else "tfidf"

    # -- node information -----------------------------------------------------------------------
    def has(self, node_id: int) -> bool:
        return node_id in self.nodes

    def name(self, node_id: int) -> str:
        return str(self.nodes[node_id]["name"])

    def relation_info(self, node_id: int) -> str:
        grouped: dict[str, dict[str, list[str]]] = {}
        for rel, ids in sorted(self.neighbors.get(node_id, {}).items()):
            by_type: dict[str, list[str]] = defaultdict(list)
            for i in sorted(ids):
                by_type[self.nodes[i]["type"]].append(self.name(i))
            grouped[rel] = dict(sorted(by_type.items()))
        row = self.nodes[node_id]
        return relation_text(self.name(node_id), row["type"], grouped)

    def text_info(self, node_id: int) -> str:
        row = self.nodes[node_id]
        return property_text(self.name(node_id), row["type"], row.get("source"), str(row.get("text") or ""))

    # -- vector similarity ----------------------------------------------------------------------
    def similarities(self, query: Query) -> np.ndarray:
        """The similarity of the query with every node, aligned with `node_ids`."""
        if self._vectors:
            query_vectors, node_matrix = self._vectors
            if query.query_id not in query_vectors:
                raise DataError(
                    f"{self.root / EMBEDDINGS_FILE} has no vector for query {query.query_id}",
                    "embed every selected query, or remove the file to fall back to TF-IDF",
                )
            return node_matrix @ query_vectors[query.query_id]
        if self._tfidf is None:
            self._tfidf = TfidfIndex([self.relation_info(i) + "\n" + self.text_info(i) for i in self.node_ids])
        return self._tfidf.scores(query.text)

    def _read_embeddings(self) -> tuple[dict[int, np.ndarray], np.ndarray] | None:
        path = self.root / EMBEDDINGS_FILE
        if not path.exists():
            return None
        try:
            with np.load(path) as z:
                node_ids, node_vectors = z["node_ids"].tolist(), z["node_vectors"].astype(np.float64)
                query_ids, query_vectors = z["query_ids"].tolist(), z["query_vectors"].astype(np.float64)
        except (KeyError, ValueError, OSError) as exc:
            raise DataError(f"cannot read {path}: {exc}", "write node_ids, node_vectors, query_ids, query_vectors") from None
        if len(node_ids) != len(node_vectors) or len(query_ids) != len(query_vectors):
            raise DataError(f"{path}: ids and vectors differ in length", "write one vector per id")
        row_of = {int(n): r for r, n in enumerate(node_ids)}
        missing = [i for i in self.node_ids if i not in row_of]
        if missing:
            raise DataError(f"{path} has no vector for {len(missing)} node(s) (first: {missing[0]})", "embed every node")
        matrix = node_vectors[[row_of[i] for i in self.node_ids]]
        return {int(q): v for q, v in zip(query_ids, query_vectors, strict=True)}, matrix


def folder_fingerprint(kb_dir: str | Path) -> str:
    """Changes whenever the folder's files change, so a stale candidate cache is not reused."""
    root = Path(kb_dir).expanduser()
    parts = [str(root.resolve())]
    for name in (NODES_FILE, EMBEDDINGS_FILE):
        p = root / name
        if p.exists():
            st = p.stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]
