"""Typed settings from config groups: one dataclass per group, built once, unknown keys refused.

`from_mapping(Budget, cfg.budget, "budget")` turns a Hydra mapping into the dataclass, coercing each
value to its field's type (`"10"` -> 10) and failing with one clear line on an unknown or mistyped
key (`budget.itertions`) or a value of the wrong type (`budget.train_size=abc`), so a typo never runs
silently with a default written somewhere in the code.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from optimas_cli.errors import UserError

T = TypeVar("T")
_SCALARS = (bool, int, float, str)


def from_mapping(cls: type[T], mapping: Mapping | None, group: str) -> T:
    """Build dataclass `cls` from `mapping` (a dict or DictConfig); `group` names it in errors."""
    values = dict(mapping or {})
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UserError(f"unknown {group} setting(s) {', '.join(f'{group}.{k}' for k in unknown)}",
                        f"use only {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(cls)
    typed = {k: _coerce(v, hints[k], f"{group}.{k}") for k, v in values.items()}
    missing = [n for n, f in fields.items() if n not in typed and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise UserError(f"missing {group} setting(s) {', '.join(f'{group}.{k}' for k in missing)}",
                        f"set them in conf/{group}/ or on the command line")
    return cls(**typed)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else (hint,)
    if value is None:
        if type(None) in options or hint is Any:
            return None
        raise UserError(f"{key} must be set (got null)", f"give {key} {_name(options)}")
    for option in options:
        if option is type(None):
            continue
        if option is Any or typing.get_origin(option) is not None or option not in _SCALARS:
            return value  # containers and objects pass as they are
        converted = _scalar(value, option)
        if converted is not None:
            return converted
    raise UserError(f"{key}={value!r} is not {_name(options)}", f"e.g. {key}={_example(options)}")


def _scalar(value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        return {"true": True, "false": False}.get(str(value).lower())
    if isinstance(value, bool):
        return None  # True is not a number here, whatever Python says
    try:
        if kind is int:
            number = float(value)
            return int(number) if number.is_integer() else None
        return kind(value)
    except (TypeError, ValueError):
        return None


_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "text"}


def _name(options: tuple) -> str:
    return " or ".join(_NAMES.get(o, getattr(o, "__name__", str(o))) for o in options if o is not type(None))


def _example(options: tuple) -> str:
    first = next(o for o in options if o is not type(None))
    return {int: "10", float: "0.5", bool: "true", str: "name"}.get(first, "...")
