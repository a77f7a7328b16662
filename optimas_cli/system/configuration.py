"""The joint configuration v = (v_1, ..., v_K): copied with one slot replaced, saved, loaded."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from optimas_cli.system.run_folder import relative_inside


class SystemConfig(Mapping):
    """An immutable mapping from component name to its configuration value (JSON-serialisable)."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = dict(values)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SystemConfig) and self._values == other._values

    def __repr__(self) -> str:
        return f"SystemConfig({self._values!r})"

    def replace(self, name: str, value: Any) -> SystemConfig:
        if name not in self._values:
            raise KeyError(f"no component named {name!r} in this configuration")
        return SystemConfig({**self._values, name: value})

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._values))

    def save(self, path: str | Path) -> None:
        """Write atomically, so a run killed mid-write never leaves a half-written configuration; adapter
        folders beside the file are named relative to it (`load` callers find them with adapters_found_in)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(relative_inside(self._values, path.parent), indent=2, ensure_ascii=False))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> SystemConfig:
        return cls(json.loads(Path(path).read_text()))
