"""The real embedded model: SmolLM2-135M-Instruct converted from its shipped GGUF, through litellm."""
from __future__ import annotations

import litellm
import pytest

from optimas_cli.lm.local.provider import register_provider
from optimas_cli.lm.local.registry import local_model_folder


@pytest.mark.real_model
def test_smollm2_answers_through_litellm():
    register_provider()
    folder = local_model_folder("local/smollm2-135m-instruct")  # converted once into the cache directory
    assert (folder / "model.safetensors").is_file() and (folder / "chat_template.jinja").is_file()
    response = litellm.completion(
        model="local/smollm2-135m-instruct",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8,
        temperature=0,
    )
    text = response.choices[0].message.content
    assert "Paris" in text, text  # random or mis-converted weights would not know it
    assert 0 < response.usage.completion_tokens <= 8
