"""Plain-JSON values: validation, the reversible encoding of non-finite floats, fingerprints.

JSON has no NaN or infinity. The ledger stores a non-finite float as the one-key object
``{"$float": "nan" | "inf" | "-inf"}`` and decodes it back on load (docs/ledger.md). Everything
else is stored as standard JSON.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from .._errors import ItemError, ResultError

FLOAT_TAG = "$float"
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what every JSON reader we know of keeps exact
#: The deepest nesting of lists and objects an item may have, the item itself being level 1.
#: orjson refuses to write values nested 255 levels deep; the ledger wraps an item in three
#: (document, tasks, record) and a non-finite float's tag adds one, so 200 leaves a margin.
MAX_DEPTH = 200
_FIX_TEXT = ("it contains an unpaired surrogate, as os.fsdecode() returns for bytes that are not "
             "UTF-8 (a file name in another encoding); pass text that is valid UTF-8, e.g. "
             "os.fsencode(s).decode('utf-8', 'replace')")


class _TooDeep(Exception):
    """Raised inside `encode_item` at `MAX_DEPTH`; its caller says whether it is a cycle."""


def encode_float(x: float) -> float | dict[str, str]:
    if math.isfinite(x):
        return x
    return {FLOAT_TAG: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _scalar_of(value: Any) -> Any:
    """A numpy or JAX 0-d value as a Python scalar; anything else unchanged."""
    module = type(value).__module__ or ""
    if module.startswith(("numpy", "jax", "jaxlib")) and getattr(value, "shape", None) == ():
        return value.item()
    return value


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    module, name = type(value).__module__, type(value).__qualname__
    kind = name if module == "builtins" else f"{module}.{name}"  # "an int", "a numpy.ndarray"
    kind = f"{kind} of shape {tuple(shape)}" if shape is not None else kind
    return ("an " if kind[:1] in "aeiouAEIOU" else "a ") + kind


def _path(parts: list[Any]) -> str:
    return "".join(f"[{p!r}]" for p in parts)


def encode_item(value: Any, where: str, parts: list[Any] | None = None) -> Any:
    """Validate one item (plain JSON) and return its stored form.

    Dicts with str keys, lists/tuples, str, int, float, bool and None are accepted; numpy and JAX
    scalars are converted; non-finite floats are tagged. Anything else raises `ItemError`
    naming ``where`` and the path inside it, as do integers beyond 64 bits, nesting deeper than
    `MAX_DEPTH` and an item that contains itself. (Strings that are not valid UTF-8 are found
    when the item's fingerprint is computed: `unwritable_message`.)
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:  # fast path for the common leaves
        return value
    if kind is float and value - value == 0.0:
        return value
    if parts is None:  # the item itself: diagnose a nesting too deep here, with the whole item
        parts = []
        try:
            return encode_item(value, where, parts)
        except _TooDeep:
            raise ItemError(_too_deep_message(value, where, parts)) from None
    value = _scalar_of(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ItemError(
                f"{where}{_path(parts)} is the integer {value}, too large for JSON readers to keep "
                "exact; pass it as a string"
            )
        return int(value)
    if isinstance(value, float):
        return encode_float(float(value))
    if isinstance(value, dict):
        if len(parts) >= MAX_DEPTH:
            raise _TooDeep
        out = {}
        for key, sub in value.items():
            if not isinstance(key, str):
                raise ItemError(
                    f"{where}{_path(parts)} has the key {key!r} of type {type(key).__name__}; "
                    "JSON object keys are strings: use str(key)"
                )
            kind = type(sub)
            if kind is str or kind is bool or sub is None or (kind is int and
                                                               _INT_MIN <= sub <= _INT_MAX):
                out[key] = sub
                continue
            parts.append(key)
            out[key] = encode_item(sub, where, parts)
            parts.pop()
        if len(out) == 1 and FLOAT_TAG in out:
            raise ItemError(
                f"{where}{_path(parts)} is an object whose only key is {FLOAT_TAG!r}, which the "
                "ledger reserves for non-finite floats; rename the key"
            )
        return out
    if isinstance(value, (list, tuple)):
        if len(parts) >= MAX_DEPTH:
            raise _TooDeep
        out_list = []
        for i, sub in enumerate(value):
            parts.append(i)
            out_list.append(encode_item(sub, where, parts))
            parts.pop()
        return out_list
    raise ItemError(
        f"{where}{_path(parts)} is {_describe(value)}, which is not plain JSON; items may hold "
        "only dicts with str keys, lists, str, int, float, bool and None (convert arrays with "
        ".tolist())"
    )


def _too_deep_message(root: Any, where: str, parts: list[Any]) -> str:
    """Why `encode_item` stopped at ``parts``: a container that contains itself, or depth."""
    seen: dict[int, int] = {}
    node = root
    for level, key in enumerate(parts):
        if id(node) in seen:
            first = seen[id(node)]
            return (f"{where}{_path(parts[:level])} is the same {type(node).__name__} as "
                    f"{where}{_path(parts[:first])}: the item contains itself (a cycle), which "
                    "JSON cannot hold; pass a copy without the reference back")
        seen[id(node)] = level
        node = node[key]
    return (f"{where}{_path(parts[:8])}... nests lists and objects more than {MAX_DEPTH} levels "
            f"deep, more than the ledger can write; flatten it or store it in a file and pass "
            "the file's path")


def unwritable_message(value: Any, where: str) -> str:
    """Why orjson refused an encoded value: the first string (or key) that is not valid UTF-8.

    ``where`` names the value (``"items[3]"``, ``"result key 'x'"``); called only after orjson
    raised, so the search costs nothing on the normal path."""
    found = _bad_text(value, [])
    if found is None:
        return f"{where} cannot be written as JSON; pass plain JSON values"
    parts, text, is_key = found
    what = "has a key" if is_key else "holds a string"
    return f"{where}{_path(parts)} {what} that is not valid UTF-8 ({text!r}): {_FIX_TEXT}"


def _bad_text(value: Any, parts: list[Any]) -> tuple[list[Any], str, bool] | None:
    if isinstance(value, str):
        return None if _utf8(value) else (list(parts), value, False)
    if isinstance(value, dict):
        for key, sub in value.items():
            if isinstance(key, str) and not _utf8(key):
                return list(parts), key, True
            parts.append(key)
            found = _bad_text(sub, parts)
            parts.pop()
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            parts.append(i)
            found = _bad_text(sub, parts)
            parts.pop()
            if found is not None:
                return found
    return None


def _utf8(text: str) -> bool:
    """True if ``text`` can be written as UTF-8 (no unpaired surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode(value: Any) -> Any:
    """The inverse of the ledger encoding: tagged non-finite floats back to floats."""
    if isinstance(value, dict):
        if len(value) == 1 and FLOAT_TAG in value:
            return _NONFINITE[value[FLOAT_TAG]]
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def decode_flat(result: dict[str, Any]) -> dict[str, Any]:
    """Decode a flat result dict (the fast path of `decode`)."""
    out = result
    for key, value in result.items():
        if type(value) is dict:
            if out is result:
                out = dict(result)
            out[key] = _NONFINITE[value[FLOAT_TAG]]
    return out


def encode_result(result: Any, task_id: str | None = None) -> dict[str, Any]:
    """Validate what ``fn`` returned and return its stored form, or raise `ResultError`.

    Everything the ledger could not write is refused here: non-str keys, integers beyond 64
    bits, arrays and other objects, and strings (keys too) that are not valid UTF-8. With
    ``task_id``, the error's message begins with ``task '<task_id>': ``.
    """
    task = "" if task_id is None else f"task {task_id!r}: "
    if not isinstance(result, dict):
        raise ResultError(
            f"{task}fn returned {_describe(result)}; it must return a flat dict of "
            "str -> number/str/bool/None, e.g. {'loss': 0.1}"
        )
    out: dict[str, Any] = {}
    for key, value in result.items():
        if type(key) is not str or not key.isascii():
            if not isinstance(key, str):
                raise ResultError(
                    f"{task}fn returned a dict with the key {key!r} of type "
                    f"{type(key).__name__}; result keys must be strings"
                )
            if not _utf8(key):
                raise ResultError(f"{task}fn returned a result key that is not valid UTF-8 "
                                  f"({key!r}): {_FIX_TEXT}")
        value = _scalar_of(value)
        if value is None or isinstance(value, bool):
            out[key] = value
        elif isinstance(value, str):
            if not _utf8(value):
                raise ResultError(f"{task}result key {key!r} holds a string that is not valid "
                                  f"UTF-8 ({value!r}): {_FIX_TEXT}")
            out[key] = value
        elif isinstance(value, int):
            if not _INT_MIN <= value <= _INT_MAX:
                raise ResultError(
                    f"{task}fn returned {key!r}: {value}, an integer too large for JSON readers "
                    "to keep exact; return it as a float or a string"
                )
            out[key] = int(value)
        elif isinstance(value, float):
            out[key] = encode_float(float(value))
        else:
            raise ResultError(
                f"{task}fn returned {key!r}: {_describe(value)}; result values must be numbers, "
                "strings, bools or None (reduce arrays to scalars, e.g. float(x.sum()), or save "
                "them to a file and return its path)"
            )
    return out


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes of a stored value: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def fingerprint(stored_item: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of an item in its stored form."""
    return "sha256:" + hashlib.sha256(canonical(stored_item)).hexdigest()


def changed_fields(old: Any, new: Any, limit: int = 5) -> list[dict[str, Any]]:
    """The paths where two stored items differ: ``[{"field", "old", "new"}]``, at most ``limit``.

    A missing side is reported as the string ``"<missing>"``.
    """
    found: list[dict[str, Any]] = []

    def walk(a: Any, b: Any, parts: list[Any]) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in list(a) + [k for k in b if k not in a]:
                parts.append(key)
                walk(a.get(key, _MISSING), b.get(key, _MISSING), parts)
                parts.pop()
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                parts.append(i)
                walk(x, y, parts)
                parts.pop()
        elif canonical_or_none(a) != canonical_or_none(b):
            field = ".".join(str(p) for p in parts) or "<item>"
            found.append({"field": field, "old": _shown(a), "new": _shown(b)})

    walk(old, new, [])
    return found


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def canonical_or_none(value: Any) -> bytes | None:
    return None if value is _MISSING else canonical(value)


def _shown(value: Any) -> Any:
    if value is _MISSING:
        return "<missing>"
    text = orjson.dumps(value).decode()
    return value if len(text) <= 80 else text[:77] + "..."
