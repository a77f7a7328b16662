"""A run folder: resolved config, log, checkpoints and results.json, all written atomically."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


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

    def __str__(self) -> str:
        return str(self.path)
