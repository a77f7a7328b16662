"""Values crossing between the judge and the solution's process BY VALUE (judge.py, inside the sandbox).

A value becomes JSON text in which every container is a tagged list (["list", ...], ["ndarray",
dtype, shape, base64], ["DataFrame", ...]); JSON's scalars stand for themselves. Decoding builds
new objects of the standard library, numpy and pandas from plain data only: it never unpickles,
never calls a method of an object the other side made, and resolves a function or class (a "ref")
only by importing a library module by name and reading an attribute, checked on the sending side
to name that very object. So what the judge decodes is data, whatever the solution sent.

What crosses: None, bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
frozenset, range, OrderedDict, Counter, defaultdict, deque, Decimal, Fraction, datetime's date,
time, datetime, timedelta and timezones (datetime.timezone, zoneinfo, pytz), UUID, Path, numpy
arrays (not structured ones), scalars, dtypes and random Generators, random.Random, pandas
DataFrame, Series, Index (Range, Multi, Datetime with its freq), Timestamp, Timedelta, NaT, NA, and
library classes (and, to the solution's process, library functions). Subclasses of builtin containers and numbers cross as their builtin
base (a list subclass arrives as a list). Anything else raises Uncrossable, as does a cycle.
Standard library only, numpy and pandas where the sending side uses them.
"""
from __future__ import annotations

import base64
import collections
import datetime
import decimal
import fractions
import importlib
import json
import pathlib
import random
import re
import uuid

MAX_DEPTH = 100
NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
# The judge decodes a reference only to a class (isinstance needs the judge's own); the worker, whose
# code is the solution's anyway, to any library object (np.mean handed to task_func).
allow_any_ref = False
BUILTIN_BASES = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


class Uncrossable(TypeError):
    """A value that cannot cross by value (a generator, an open file, a matplotlib Axes, ...)."""


def dumps(value) -> str:
    return json.dumps(encode(value), separators=(",", ":"))


def loads(text: str):
    try:
        return decode(json.loads(text))
    except Uncrossable:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, OverflowError) as exc:
        raise Uncrossable(f"an undecodable value ({type(exc).__name__}: {exc})"[:300]) from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _resolve(module: str, qualname: str):
    if not (NAME.match(module) and NAME.match(qualname)) or module.startswith("__"):
        raise Uncrossable(f"not a library name: {module}.{qualname}")
    value = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def ref_of(value) -> list | None:
    """["ref", module, qualname] when importing that name gives `value` itself, else None."""
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if type(module) is not str or type(name) is not str:
        return None
    try:
        return ["ref", module, name] if _resolve(module, name) is value else None
    except (Exception, Uncrossable):  # noqa: BLE001 - an object that cannot be named does not cross
        return None


def encode(value, depth: int = 0):
    if depth > MAX_DEPTH:
        raise Uncrossable("the value is nested too deeply (or holds itself)")
    kind, d = type(value), depth + 1
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -(1 << 63) <= value < (1 << 63) else ["int", format(value, "x")]
    if kind is float:
        return value
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, *[encode(v, d) for v in value]]
    if kind is dict:
        return ["dict", *[[encode(k, d), encode(v, d)] for k, v in value.items()]]
    encoded = _encode_library(value, kind, d) if kind.__module__ in ("numpy", "pandas") or kind.__module__.startswith(
        ("numpy.", "pandas.")) else _encode_stdlib(value, kind, d)
    if encoded is not None:
        return encoded
    for base in BUILTIN_BASES:  # a subclass crosses as its builtin base, without its own methods
        if isinstance(value, base):
            return encode(base(value), depth)
    ref = ref_of(value) if callable(value) else None
    if ref is not None:
        return ref
    raise Uncrossable(f"a {kind.__module__}.{kind.__qualname__} object cannot cross to the judge by value")


def _tz(tz):
    if tz is None:
        return None
    if type(tz) is datetime.timezone:
        offset, *name = tz.__getinitargs__()  # the name only when one was given
        return ["timezone", offset.total_seconds(), name[0] if name else None]
    module = type(tz).__module__
    if module == "zoneinfo" and getattr(tz, "key", None):
        return ["zoneinfo", tz.key]
    if module.startswith("pytz") and getattr(tz, "zone", None):
        return ["pytz", tz.zone]
    raise Uncrossable(f"a {module}.{type(tz).__name__} time zone cannot cross by value")


def _encode_stdlib(value, kind, d):
    if kind is complex:
        return ["complex", value.real, value.imag]
    if kind is bytes or kind is bytearray:
        return [kind.__name__, _b64(bytes(value))]
    if kind is range:
        return ["range", value.start, value.stop, value.step]
    if kind is collections.OrderedDict or kind is collections.Counter:
        return [kind.__name__, *[[encode(k, d), encode(v, d)] for k, v in value.items()]]
    if kind is collections.defaultdict:
        factory = None if value.default_factory is None else ref_of(value.default_factory)
        if value.default_factory is not None and factory is None:
            raise Uncrossable("a defaultdict whose factory is not a library function")
        return ["defaultdict", factory, *[[encode(k, d), encode(v, d)] for k, v in value.items()]]
    if kind is collections.deque:
        return ["deque", value.maxlen, *[encode(v, d) for v in value]]
    if kind is decimal.Decimal:
        return ["Decimal", str(value)]
    if kind is fractions.Fraction:
        return ["Fraction", encode(value.numerator, d), encode(value.denominator, d)]
    if kind is datetime.datetime:
        return ["datetime", value.replace(tzinfo=None).isoformat(), _tz(value.tzinfo), value.fold]
    if kind is datetime.date:
        return ["date", value.isoformat()]
    if kind is datetime.time:
        return ["time", value.replace(tzinfo=None).isoformat(), _tz(value.tzinfo), value.fold]
    if kind is datetime.timedelta:
        return ["timedelta", value.days, value.seconds, value.microseconds]
    if kind is datetime.timezone or kind.__module__ in ("zoneinfo",) or kind.__module__.startswith("pytz"):
        return ["tz", _tz(value)]
    if kind is uuid.UUID:
        return ["UUID", value.hex]
    if kind in (pathlib.PosixPath, pathlib.PurePosixPath):
        return [kind.__name__, str(value)]
    if kind is random.Random:
        return ["Random", encode(value.getstate(), d)]
    if kind is re.Pattern:
        return ["Pattern", encode(value.pattern, d), value.flags]
    return None


def _array(value, d):
    import numpy as np

    if value.dtype.kind == "V":
        raise Uncrossable("a structured numpy array cannot cross by value")
    if value.dtype.kind == "O":
        return ["ndarray", "|O", list(value.shape), *[encode(v, d) for v in value.ravel(order="C")]]
    return ["ndarray", value.dtype.str, list(value.shape), _b64(np.ascontiguousarray(value).tobytes())]


def _column(values, d):
    """The values of a Series or an Index: a numpy array, a Categorical or another extension array."""
    import numpy as np
    import pandas as pd

    if isinstance(values.dtype, np.dtype):
        return _array(np.asarray(values), d)
    if isinstance(values.dtype, pd.CategoricalDtype):
        return ["Categorical", encode(values.categories, d), _array(values.codes, d), bool(values.ordered)]
    return ["ext", str(values.dtype), *[encode(v, d) for v in values]]


def _encode_library(value, kind, d):
    import numpy as np

    if kind is np.ndarray:
        return _array(value, d)
    if isinstance(value, np.generic):
        if value.dtype.kind in "OV":
            raise Uncrossable(f"a numpy {value.dtype} scalar cannot cross by value")
        return ["npscalar", value.dtype.str, _b64(value.tobytes())]
    if isinstance(value, np.dtype):
        return ["dtype", value.str] if value.kind != "V" else None
    if kind is np.random.Generator:
        bits = type(value.bit_generator).__name__
        return ["Generator", bits, encode(value.bit_generator.state, d)]
    import pandas as pd

    if kind is pd.DataFrame:
        return ["DataFrame", encode(value.index, d), encode(value.columns, d),
                *[_column(value.iloc[:, i].array, d) for i in range(value.shape[1])]]
    if kind is pd.Series:
        return ["Series", _column(value.array, d), encode(value.index, d), encode(value.name, d)]
    if kind is pd.RangeIndex:
        return ["RangeIndex", value.start, value.stop, value.step, encode(value.name, d)]
    if kind is pd.MultiIndex:
        return ["MultiIndex", [encode(level, d) for level in value.levels], [_array(c, d) for c in value.codes],
                encode(list(value.names), d)]
    if isinstance(value, pd.Index) and kind.__module__.startswith("pandas"):
        return ["Index", _column(value.array, d), encode(value.name, d), getattr(value, "freqstr", None)]
    if value is pd.NaT:
        return ["NaT"]
    if value is pd.NA:
        return ["NA"]
    if kind is pd.Timestamp:
        return ["Timestamp", value.as_unit("ns").value, value.unit, _tz(value.tz)]  # UTC when it has a zone
    if kind is pd.Timedelta:
        return ["Timedelta", value.as_unit("ns").value, value.unit]
    return None


def decode(node):
    if not isinstance(node, list):
        if isinstance(node, dict):
            raise Uncrossable("an untagged mapping")
        return node
    tag, rest = node[0], node[1:]
    handler = _DECODERS.get(tag) if type(tag) is str else None
    if handler is None:
        raise Uncrossable(f"an unknown tag {tag!r}")
    return handler(rest)


def _pairs(rest):
    return [(decode(k), decode(v)) for k, v in rest]


def _decode_tz(node):
    if node is None:
        return None
    tag = node[0]
    if tag == "timezone":
        offset = datetime.timedelta(seconds=node[1])
        return datetime.timezone(offset) if node[2] is None else datetime.timezone(offset, node[2])
    if tag == "zoneinfo":
        import zoneinfo

        return zoneinfo.ZoneInfo(node[1])
    if tag == "pytz":
        import pytz

        return pytz.timezone(node[1])
    raise Uncrossable(f"an unknown time zone {tag!r}")


def _datetime(rest):
    naive = datetime.datetime.fromisoformat(rest[0]).replace(fold=rest[2])
    tz = _decode_tz(rest[1])
    if tz is not None and hasattr(tz, "localize"):  # pytz: its offset for that moment, not the zone's first
        return tz.localize(naive)
    return naive.replace(tzinfo=tz)


def _ndarray(rest):
    import numpy as np

    dtype, shape = rest[0], tuple(int(n) for n in rest[1])
    if dtype == "|O":
        array = np.empty(shape, dtype=object)
        for i, item in enumerate(rest[2:]):
            array.flat[i] = decode(item)
        return array
    return np.frombuffer(_unb64(rest[2]), dtype=_dtype(dtype)).reshape(shape).copy()


def _dtype(text):
    import numpy as np

    if text == "|O":
        return np.dtype(object)
    if not re.match(r"^[<>|=]?[biufcmMUS]\d+(\[\w+\])?$", text):
        raise Uncrossable(f"an array of dtype {text!r}")
    return np.dtype(text)


def _npscalar(rest):
    return _ndarray([rest[0], [], rest[1]])[()]


def _generator(rest):
    import numpy as np

    if rest[0] not in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"):
        raise Uncrossable(f"a random generator of {rest[0]!r}")
    bits = getattr(np.random, rest[0])()
    bits.state = decode(rest[1])
    return np.random.Generator(bits)


def _column_values(node):
    import pandas as pd

    if node[0] == "Categorical":
        return pd.Categorical.from_codes(decode(node[2]), categories=decode(node[1]), ordered=node[3])
    if node[0] == "ext":
        return pd.array([decode(v) for v in node[2:]], dtype=pd.api.types.pandas_dtype(node[1]))
    return decode(node)


def _index(rest):
    import pandas as pd

    values = _column_values(rest[0])
    index = pd.Index(values, name=decode(rest[1]), dtype=values.dtype, copy=False)
    if rest[2] is not None:
        index = type(index)(index, freq=rest[2], name=index.name)
    return index


def _series(rest):
    import pandas as pd

    values = _column_values(rest[0])
    return pd.Series(values, index=decode(rest[1]), name=decode(rest[2]), dtype=values.dtype, copy=False)


def _frame(rest):
    import pandas as pd

    index, columns = decode(rest[0]), decode(rest[1])
    frame = pd.DataFrame({i: _column_values(c) for i, c in enumerate(rest[2:])}, index=index)
    frame.columns = columns
    return frame


def _timestamp(rest):
    import pandas as pd

    stamp, tz = pd.Timestamp(rest[0], unit="ns"), _decode_tz(rest[2])
    return (stamp if tz is None else stamp.tz_localize("UTC").tz_convert(tz)).as_unit(rest[1])


def _pd(name):
    def build(rest):
        import pandas as pd

        return {"NaT": lambda: pd.NaT, "NA": lambda: pd.NA,
                "Timedelta": lambda: pd.Timedelta(rest[0], unit="ns").as_unit(rest[1]),
                "RangeIndex": lambda: pd.RangeIndex(rest[0], rest[1], rest[2], name=decode(rest[3])),
                "MultiIndex": lambda: pd.MultiIndex(levels=[decode(x) for x in rest[0]],
                                                    codes=[decode(x) for x in rest[1]], names=decode(rest[2]))}[name]()
    return build


_DECODERS = {
    "list": lambda r: [decode(v) for v in r],
    "tuple": lambda r: tuple(decode(v) for v in r),
    "set": lambda r: {decode(v) for v in r},
    "frozenset": lambda r: frozenset(decode(v) for v in r),
    "dict": lambda r: dict(_pairs(r)),
    "int": lambda r: int(r[0], 16),
    "complex": lambda r: complex(r[0], r[1]),
    "bytes": lambda r: _unb64(r[0]),
    "bytearray": lambda r: bytearray(_unb64(r[0])),
    "range": lambda r: range(r[0], r[1], r[2]),
    "OrderedDict": lambda r: collections.OrderedDict(_pairs(r)),
    "Counter": lambda r: collections.Counter(dict(_pairs(r))),
    "defaultdict": lambda r: collections.defaultdict(None if r[0] is None else decode(r[0]), _pairs(r[1:])),
    "deque": lambda r: collections.deque([decode(v) for v in r[1:]], r[0]),
    "Decimal": lambda r: decimal.Decimal(r[0]),
    "Fraction": lambda r: fractions.Fraction(decode(r[0]), decode(r[1])),
    "datetime": _datetime,
    "date": lambda r: datetime.date.fromisoformat(r[0]),
    "time": lambda r: datetime.time.fromisoformat(r[0]).replace(tzinfo=_decode_tz(r[1]), fold=r[2]),
    "timedelta": lambda r: datetime.timedelta(days=r[0], seconds=r[1], microseconds=r[2]),
    "tz": lambda r: _decode_tz(r[0]),
    "UUID": lambda r: uuid.UUID(hex=r[0]),
    "PosixPath": lambda r: pathlib.PosixPath(r[0]),
    "PurePosixPath": lambda r: pathlib.PurePosixPath(r[0]),
    "Random": lambda r: _random(decode(r[0])),
    "Pattern": lambda r: re.compile(decode(r[0]), r[1]),
    "ndarray": _ndarray,
    "npscalar": _npscalar,
    "dtype": lambda r: _dtype(r[0]),
    "Generator": _generator,
    "DataFrame": _frame,
    "Series": _series,
    "Index": _index,
    "Timestamp": _timestamp,
    **{name: _pd(name) for name in ("NaT", "NA", "Timedelta", "RangeIndex", "MultiIndex")},
    "ref": lambda r: _referenced(r[0], r[1]),
}


def _referenced(module, qualname):
    value = _resolve(module, qualname)
    if not (allow_any_ref or isinstance(value, type)):
        raise Uncrossable(f"a reference to {module}.{qualname}, which is not a class")
    return value


def _random(state):
    rng = random.Random()
    rng.setstate(state)
    return rng
