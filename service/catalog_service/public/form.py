"""Query strings as Zope's publisher and plone.restapi's ``@search`` read them.

Zope types form fields by suffixes (``b_size:int``, ``portal_type:list``, ``created.query:record:
list:date``) and makes a list of a name given twice; plone.restapi then nests dotted names
(``path.query``, ``path.depth``) into one index query (``unflatten_dotted_dict``). Dates (``:date``)
become ISO 8601 strings, which the service's date indexes read; a date without an offset is read
as UTC (the service cannot know the Plone process's zone, docs/decisions/0002).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import orjson

from ..errors import BadRequest

# A field's flags after its name; anything else after a colon is no flag (Zope keeps it in the name).
_LIST_FLAGS = {"list", "tuple"}
_RECORD_FLAGS = {"record", "records"}
_IGNORED_FLAGS = {"utf8", "latin1", "ascii", "ustring", "method", "action", "default_method", "default_action"}


def _text(value: str) -> str:
    return value.replace("\r\n", "\n").replace("\n\r", "\n")


def _int(value: str) -> int:
    if not value.strip():
        raise ValueError("an integer was expected, the value is empty")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"an integer was expected, got {value!r}") from None


def _float(value: str) -> float:
    if not value.strip():
        raise ValueError("a number was expected, the value is empty")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"a number was expected, got {value!r}") from None


def _required(value: str) -> str:
    if not value.strip():
        raise ValueError("a value is required")
    return value


def _boolean(value: str) -> bool:
    # ZPublisher's field2boolean: only the text "False" and the empty string are false.
    return value != "False" and bool(value)


def _json(value: str):
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ValueError(f"not JSON: {value!r}") from None


CONVERTERS = {
    "int": _int, "long": _int, "float": _float, "string": str, "text": _text, "required": _required,
    "boolean": _boolean, "date": lambda v: iso_date(v), "date_international": lambda v: iso_date(v, True),
    "tokens": str.split, "lines": lambda v: v.splitlines(), "json": _json,
}

_ZONE = re.compile(r"^(?:(?:GMT|UTC)(?P<sign>[+-])(?P<h>\d{1,2})(?::?(?P<m>\d{2}))?|(?P<utc>GMT|UTC|Z)|"
                   r"(?P<osign>[+-])(?P<oh>\d{2}):?(?P<om>\d{2}))$", re.IGNORECASE)
_SLASHED = re.compile(r"^(?P<a>\d{1,4})/(?P<b>\d{1,2})/(?P<c>\d{1,4})"
                      r"(?:[ T](?P<H>\d{1,2}):(?P<M>\d{2})(?::(?P<S>\d{2})(?:\.(?P<f>\d{1,6}))?)?)?"
                      r"(?:\s*(?P<zone>\S+))?$")


def _zone(text: str) -> timezone:
    match = _ZONE.match(text)
    if match is None:
        raise ValueError(f"unknown time zone {text!r}")
    if match["utc"]:
        return UTC
    sign = -1 if (match["sign"] or match["osign"]) == "-" else 1
    hours = int(match["h"] or match["oh"])
    minutes = int(match["m"] or match["om"] or 0)
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def iso_date(value: str, international: bool = False) -> str:
    """A date as Zope's ``DateTime`` reads its usual forms (ISO 8601, ``2025/03/01 09:00 GMT+1``;
    with ``international``, day first), as ISO 8601 with an offset. ValueError otherwise."""
    text = value.strip()
    if not text:
        raise ValueError("a date was expected, the value is empty")
    iso = text[:-1] + "+00:00" if text[-1:] in "Zz" else text
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        match = _SLASHED.match(text)
        if match is None:
            raise ValueError(f"not a date: {value!r}") from None
        a, b, c = int(match["a"]), int(match["b"]), int(match["c"])
        if len(match["a"]) == 4:
            year, month, day = a, b, c
        elif international:
            year, month, day = c, b, a
        else:  # DateTime reads mm/dd/yyyy unless told the date is international
            year, month, day = c, a, b
        try:
            moment = datetime(year, month, day, int(match["H"] or 0), int(match["M"] or 0), int(match["S"] or 0),
                              int((match["f"] or "0").ljust(6, "0")))
        except ValueError:
            raise ValueError(f"not a date: {value!r}") from None
        if match["zone"]:
            moment = moment.replace(tzinfo=_zone(match["zone"]))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def _flags(key: str) -> tuple[str, list[str]]:
    name, *rest = key.split(":")
    flags = []
    for part in rest:
        if part in CONVERTERS or part in _LIST_FLAGS or part in _RECORD_FLAGS or part in (
                "ignore_empty", "default") or part in _IGNORED_FLAGS:
            flags.append(part)
        else:
            raise BadRequest(f"parameter {key!r}: {part!r} is no Zope field converter",
                             parameter=key, valid=sorted([*CONVERTERS, *_LIST_FLAGS, *_RECORD_FLAGS,
                                                          "ignore_empty", "default"]))
    return name, flags


def _add(target: dict, name: str, value, as_list: bool) -> None:
    if name in target:
        found = target[name]
        if isinstance(found, list):
            found.append(value)
        else:
            target[name] = [found, value]
    else:
        target[name] = [value] if as_list else value


def parse_form(pairs: list[tuple[str, str]]) -> dict:
    """The form Zope's publisher makes of a query string's ``(name, value)`` pairs."""
    form: dict = {}
    defaults: dict = {}
    for key, raw in pairs:
        name, flags = _flags(key)
        if "ignore_empty" in flags and raw == "":
            continue
        value = raw
        for flag in flags:
            if flag in CONVERTERS:
                try:
                    value = CONVERTERS[flag](value)
                except ValueError as exc:
                    raise BadRequest(f"parameter {key!r}: {exc}", parameter=key) from exc
        as_list = bool(_LIST_FLAGS & set(flags))
        target = defaults if "default" in flags else form
        if _RECORD_FLAGS & set(flags):
            record_name, dot, attribute = name.partition(".")
            if not dot or not attribute:
                raise BadRequest(f"parameter {key!r}: a record field is named record.attribute", parameter=key)
            if "records" in flags:
                records = target.setdefault(record_name, [])
                if not records or attribute in records[-1]:
                    records.append({})
                _add(records[-1], attribute, value, as_list)
            else:
                record = target.setdefault(record_name, {})
                if not isinstance(record, dict):
                    raise BadRequest(f"parameter {key!r}: {record_name!r} is given both as a value and a record",
                                     parameter=key)
                _add(record, attribute, value, as_list)
        else:
            _add(target, name, tuple(value) if "tuple" in flags and isinstance(value, list) else value, as_list)
    for name, value in defaults.items():
        form.setdefault(name, value)
    return form


def unflatten(form: dict) -> dict:
    """plone.restapi's ``unflatten_dotted_dict``: ``{"path.query": p, "path.depth": 1}`` becomes
    ``{"path": {"query": p, "depth": 1}}``; a plain value met on the way becomes the ``query``."""
    result: dict = {}
    for key, value in form.items():
        *parents, last = key.split(".")
        inner = result
        for part in parents:
            found = inner.get(part)
            if found is None:
                found = inner[part] = {}
            elif not isinstance(found, dict):
                found = inner[part] = {"query": found}
            inner = found
        inner[last] = value
    return result
