"""The rows a transaction writes: transcoded from the pickle (jsonstate), written in COPY's text
format.
"""

from __future__ import annotations

from dataclasses import dataclass

from ZODB.utils import u64

from plone_connector.storage import jsonstate

# class_name of records that are not ZODB pickles (kept exact, references unknown).
OPAQUE = ""


@dataclass(slots=True)
class PendingRow:
    zoid: int
    prev_tid: int
    class_name: str | None  # None: a new object's row not transcoded yet (store, _transcode)
    state_json: str
    refs: list[int]
    exact: bytes | None
    blob_id: int | None
    pickle: bytes
    data_tid: int | None = None
    exact_reason: str | None = None  # the transcoder's reason when ``exact`` is set
    # What a load from the database returns for this row: ``exact``, or the record the
    # transcoder rebuilt from the JSON in jsonb's key order (and checked).
    record: bytes | None = None

    @property
    def loaded(self) -> bytes:
        return self.exact if self.exact is not None else self.record


# Exact copies whose reason may be a transcoder gap or bug (worth a look) log at WARNING; the
# format's known limits (a type without a JSON form, bytes that are not a ZODB pickle) at INFO.
EXACT_WARNING_KINDS = frozenset({"round trip differs", "unreadable"})


def exact_kind(reason: str | None) -> str:
    """The kind of an exact copy's reason: its text up to the first colon ("unsupported",
    "unreadable", "round trip differs", "opaque")."""
    return (reason or "unknown").split(":", 1)[0].strip() or "unknown"



def transcoded(row: PendingRow) -> PendingRow:
    """``row`` (its ``pickle``, not transcoded yet) with the fields the transcoder gives it."""
    try:
        class_name, text, refs, exact, reason, record = jsonstate.encode_row(row.pickle)
    except jsonstate.TranscodeError as error:
        # Not a ZODB pickle at all (ZODB's own tests store such bytes; so do record-transforming
        # wrappers): keep it exactly. Its references are unknown, so pack refuses to collect
        # garbage while such records exist (see pack.py).
        row.class_name, row.state_json, row.exact = OPAQUE, "null", row.pickle
        row.exact_reason = f"opaque: {error}"
        return row
    row.class_name = class_name
    row.state_json = text
    if refs:
        row.refs = [int.from_bytes(ref, "big") for ref in refs]
    if exact is not None:
        row.exact = exact
        row.exact_reason = reason
    row.record = record
    return row


def copy_line(row: PendingRow) -> str:
    """The row as a line of COPY's text format for the temporary table (a fifth of psycopg's
    write_row per row)."""
    data_tid = _NULL if row.data_tid is None else row.data_tid
    return f"{row.zoid}\t{row.prev_tid}\t{_copy_fields(row)}\t{data_tid}\n"


def state_line(row: PendingRow, tid: int) -> str:
    """The row as a line of COPY's text format for zodb_object_state, written at ``tid``."""
    return f"{row.zoid}\t{tid}\t{_copy_fields(row)}\n"


def _copy_fields(row: PendingRow) -> str:
    """class_name, state, refs, exact and blob_id in COPY's text format.

    Text fields escape what COPY reads specially (backslash, tab, newline, carriage return);
    NULL is ``\\N``; bytea goes in its hex form, whose backslash is escaped too.
    """
    exact = _NULL if row.exact is None else "\\\\x" + row.exact.hex()
    blob_id = _NULL if row.blob_id is None else row.blob_id
    state = row.state_json
    if "\\" in state:  # JSON escapes control characters: only its backslashes need escaping
        state = state.replace("\\", "\\\\")
    return f"{_copy_escape(row.class_name)}\t{state}\t{int_array(row.refs)}\t{exact}\t{blob_id}"


_NULL = "\\N"


def _copy_escape(text: str) -> str:
    if "\\" in text:  # first: the escapes below add backslashes
        text = text.replace("\\", "\\\\")
    if "\t" in text:
        text = text.replace("\t", "\\t")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if "\r" in text:
        text = text.replace("\r", "\\r")
    return text


def int_array(values: list[int | None]) -> str:
    """A bigint[] in PostgreSQL's text form: a quarter of psycopg's cost of adapting a list
    (1.2 of 4.5 us per COPY row, 1,000 rows of two references)."""
    if None in values:
        return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def serial_tid(serial: bytes | str | None) -> int:
    """The tid a serial names as an integer, 0 for none (a new object)."""
    if not serial:
        return 0
    if isinstance(serial, str):  # some callers (ZODB's blob doctests) pass '\0' * 8
        serial = serial.encode("latin-1")
    return int.from_bytes(serial, "big") if len(serial) == 8 else u64(serial)  # u64 raises
