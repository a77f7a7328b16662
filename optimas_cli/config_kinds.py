"""The kinds of config value config_schema's tables are written in: each says what it takes, in words
an error can show (`an integer >= 0`, `one of strict | paired`), and why a value is not that."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimas_cli.errors import UserError


def shown(value: Any) -> str:
    """A value as the user would read it in an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


class Spec:
    """One kind of config value; `null` says whether null (the code's "none" / "use the default") is one."""

    null: bool = False

    def describe(self) -> str:
        raise NotImplementedError

    def problem(self, value: Any) -> str | None:
        """Why `value` is refused ('is not an integer', 'must be at least 1'), or None when it fits."""
        raise NotImplementedError

    def check(self, key: str, value: Any) -> None:
        if value is None:
            if self.null:
                return
            why = "is not set"
        else:
            why = self.problem(value)
            if why is None:
                return
        raise UserError(f"{key}={shown(value)} {why}", f"{key} takes {self.describe()}")

    def _or_null(self, text: str) -> str:
        return f"{text}, or null" if self.null else text


def _bounds(at_least, at_most, above=None) -> str:
    if above is not None:
        return f" > {above}" + (f" and <= {at_most}" if at_most is not None else "")
    if at_least is not None and at_most is not None:
        return f" from {at_least} to {at_most}"
    if at_least is not None:
        return f" >= {at_least}"
    return f" <= {at_most}" if at_most is not None else ""


def _out_of_range(value, at_least, at_most, above=None) -> str | None:
    if above is not None and not value > above:
        return f"must be above {above}"
    if at_least is not None and value < at_least:
        return f"must be at least {at_least}"
    if at_most is not None and value > at_most:
        return f"must be at most {at_most}"
    return None


@dataclass(frozen=True)
class Integer(Spec):
    at_least: int | None = None
    at_most: int | None = None
    null: bool = False

    def describe(self) -> str:
        return self._or_null("an integer" + _bounds(self.at_least, self.at_most))

    def problem(self, value):
        if isinstance(value, bool) or not isinstance(value, int):
            return "is not an integer"
        return _out_of_range(value, self.at_least, self.at_most)


@dataclass(frozen=True)
class Number(Spec):
    at_least: float | None = None
    at_most: float | None = None
    above: float | None = None  # an open lower bound: a timeout or a learning rate of 0 is no value
    null: bool = False

    def describe(self) -> str:
        return self._or_null("a number" + _bounds(self.at_least, self.at_most, self.above))

    def problem(self, value):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "is not a number"
        if not math.isfinite(value):  # Hydra reads nan and inf as floats; no setting means either
            return "is not a finite number"
        return _out_of_range(value, self.at_least, self.at_most, self.above)


@dataclass(frozen=True)
class Text(Spec):
    pattern: str | None = None  # a full match, e.g. the LRF's `top:N`
    meaning: str = "text"
    null: bool = False

    def describe(self) -> str:
        return self._or_null(self.meaning)

    def problem(self, value):
        if not isinstance(value, str):
            return f"is not {self.meaning}"
        if self.pattern and not re.fullmatch(self.pattern, value):
            return "is not allowed"
        return None


@dataclass(frozen=True)
class Flag(Spec):
    null: bool = False

    def describe(self) -> str:
        return self._or_null("true or false")

    def problem(self, value):
        return None if isinstance(value, bool) else "is not true or false"


class OneOf(Spec):
    def __init__(self, *choices: str, null: bool = False):
        self.choices, self.null = choices, null

    def describe(self) -> str:
        return self._or_null("one of " + " | ".join(self.choices))

    def problem(self, value):
        return None if value in self.choices else "is not allowed"


@dataclass(frozen=True)
class ListOf(Spec):
    item: Spec
    null: bool = False

    def describe(self) -> str:
        return self._or_null(f"a list of {self.item.describe()}, e.g. [a,b]")

    def problem(self, value):
        if not isinstance(value, list | tuple):
            return "is not a list"
        return next((f"holds {shown(v)}, which {why}" for v in value if (why := self.item.problem(v))), None)


@dataclass(frozen=True)
class MapOf(Spec):
    item: Spec
    null: bool = False

    def describe(self) -> str:
        return self._or_null(f"a mapping of names to {self.item.describe()}")

    def problem(self, value):
        if not isinstance(value, Mapping):
            return "is not a mapping"
        return next((f"holds {k}: {shown(v)}, which {why}" for k, v in value.items() if (why := self.item.problem(v))),
                    None)


class Node(dict):
    """A group of settings: its keys are all it takes (a `+key` it lacks is refused)."""

    def __init__(self, fields: Mapping[str, Any], null: bool = False):
        super().__init__(fields)
        self.null = null


class CheckedBy(Spec):
    """A value whose type and range have their one home elsewhere, checked there before anything runs
    (flows/validate.py and cli.py call it): the table names the home instead of repeating its rule."""

    def __init__(self, home: str):
        self.home = home

    def describe(self) -> str:
        return f"what {self.home} accepts"

    def check(self, key, value):
        return None


class AnyValue(Spec):
    """A parameter of a user's own build(): its type is its code's business."""

    def describe(self) -> str:
        return "any value"

    def check(self, key, value):
        return None
