"""The one event loop every agent run goes through, on a thread of its own. A framework's async client
(AsyncOpenAI) keeps its connections on the loop it first ran on, so a fresh `asyncio.run` per batch would
break the client on its second batch; one loop that lives as long as the process keeps them valid."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the shared loop and wait for its result (any thread but the loop's own)."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="optimas-agents", daemon=True).start()
    future = asyncio.run_coroutine_threadsafe(coroutine, _loop)
    try:
        return future.result()
    except BaseException:  # interrupted (Ctrl-C) or failed: stop what is still running of it
        future.cancel()
        raise
