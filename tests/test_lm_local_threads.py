"""Tokenizing from many threads: the provider counts a request's prompt tokens on the client's threads
while the batcher tokenizes a padded batch."""
from __future__ import annotations

import threading

from optimas_cli.lm.local.model import LocalModel


def test_prompt_tokens_on_other_threads_never_unpad_a_batch(tiny_model_dir):
    model = LocalModel("tiny", tiny_model_dir)
    prompts = ["a " * 5, "b " * 40, "c " * 90]
    errors, stop = [], threading.Event()

    def count():
        while not stop.is_set():
            model.prompt_tokens("d " * 17)

    counters = [threading.Thread(target=count) for _ in range(3)]
    for t in counters:
        t.start()
    try:
        for _ in range(300):
            try:
                encoded = model.tokenize(prompts, max_new_tokens=8)
                assert encoded["input_ids"].shape[0] == 3
            except Exception as exc:  # before: "Unable to create tensor ... padding=True"
                errors.append(exc)
    finally:
        stop.set()
        for t in counters:
            t.join()
    assert not errors, errors[:1]
