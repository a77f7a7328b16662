"""A run folder: resolved config, log, checkpoints and results.json, all written atomically."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ACCOUNTS_FILE = "accounts.json"


class RunFolder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        """Write to a temporary file then rename: a killed run never leaves a half-written file."""
        target = self.file(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        os.replace(tmp, target)
        return target

    def read_json(self, name: str, default: Any = None) -> Any:
        target = self.file(name)
        return json.loads(target.read_text()) if target.exists() else default

    def save_accounts(self, ctx) -> None:
        """What the run has spent so far (system runs, wall time, LM usage); written with every
        checkpoint, so a resumed run's results.json counts the work done before the kill."""
        usage = ctx.lm.usage() if callable(getattr(ctx.lm, "usage", None)) else {}
        self.write_json(ACCOUNTS_FILE, {"ledger": ctx.ledger.state(), "lm": usage})

    def restore_accounts(self, ctx) -> None:
        saved = self.read_json(ACCOUNTS_FILE)
        if saved is None:
            return
        ctx.ledger.restore(saved["ledger"])
        if saved.get("lm") and hasattr(ctx.lm, "restore_usage"):
            ctx.lm.restore_usage(saved["lm"])

    def __str__(self) -> str:
        return str(self.path)
