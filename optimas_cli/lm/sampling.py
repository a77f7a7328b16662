"""Seeds for individual samples, shared by the client (API seeds) and the local provider.

A sample's random stream is a function of the run seed, the sample's position (sample index, and its
offset among n samples) and the request's chat messages. The messages are what make the noise
independent across prompts: without them every call at temperature > 0 with the same three numbers
drew the same Gumbel noise, so the reader's and the answerer's calls of one rollout, rollout r of every
input, and Stage 1's candidate i of every input were correlated draws, not samples of the policy.

Common random numbers remain exactly where one request is compared with itself under another setting:
the same messages at the same position share their noise whatever the model, adapter, temperature or
token budget. That is what paired comparisons want (the validation gate's before/after of a weights
component, whose prompts do not change with its adapter; and every component whose requests a change
upstream did not touch replays its very sample, as the call cache serves it).

Shared noise (the run's `paired_noise=shared`): a request may carry a `noise_key` naming its place in a
paired comparison (run seed, example, component, repeat: system/compound.py), and then the key replaces
the messages. Two configurations compared on one example then send their different downstream requests
with the same random numbers: the embedded model perturbs both rows with the same Gumbel draws, and an
OpenAI-compatible server gets the same `seed`, so the two samples agree wherever the two requests' token
distributions allow (probability >= (1 - TV) / (1 + TV) per token for Gumbel sampling, Daliri, Musco and
Suresh, arXiv 2408.07978). A pair's label then measures the difference between its candidates, not
between two independent draws of the noise downstream.
"""
from __future__ import annotations

import hashlib
import json

# Enters the call cache's key of every sampled row: rows drawn under an earlier seeding (version 1 keyed
# the noise by position only) are never served as samples of this one.
SEEDING_VERSION = 2


def request_digest(messages: list[dict]) -> str:
    """A stable digest of a request's chat (Python's hash() is salted per process; this is not)."""
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def sample_seed(seed: int | None, messages: list[dict], sample_index: int, sample_offset: int = 0,
                noise_key: str | None = None) -> int:
    """A stable 63-bit seed for one sample of the request `messages`, from (run seed, request, sample
    index, position among n samples); with a `noise_key`, the key stands in for the request.

    The local provider gives each sample its own random stream from this seed, so a sample is
    reproducible on its own, whatever else shares its batch.
    """
    source = request_digest(messages) if noise_key is None else f"shared:{noise_key}"
    key = f"{seed or 0}:{source}:{sample_index}:{sample_offset}"
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
