"""`transformers serve` of a model folder on 127.0.0.1 (a free port), as docs/serving.md runs it: a real
OpenAI-compatible server for the tests, killed when the `with` block ends."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

START_SECONDS = 120  # loading SmolLM2 takes a few seconds; a busy CI machine gets the rest


@contextlib.contextmanager
def transformers_serve(folder: str | Path | None) -> Iterator[str]:
    """Yields the server's api_base (http://127.0.0.1:<port>/v1); skips where its extras are missing.
    `folder` None: the server loads whichever model folder a request names, on demand."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    cli = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    if cli is None:
        pytest.skip("the `transformers` command is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    log = tempfile.TemporaryFile()  # not a pipe: a long run's warnings would fill it and block the server
    pinned = [str(folder)] if folder is not None else []
    server = subprocess.Popen([cli, "serve", *pinned, "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=log)
    api_base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{api_base}/models", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"transformers serve did not start: {log.read()[-2000:]!r}") from None
                time.sleep(0.5)
        yield api_base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
