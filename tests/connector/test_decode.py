"""The connector decodes the service's answers with orjson, except where orjson would change a
value: integers beyond 64 bits, which it rounds to floats, go through json."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from plone_connector.catalog.client import _decode

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@given(values)
def test_every_json_value_decodes_exactly(value):
    body = json.dumps({"items": [{"metadata": {"v": value}}]}).encode()
    assert _decode(body) == json.loads(body)


def test_integers_beyond_64_bits_stay_integers():
    body = b'{"items_total": 1, "items": [{"metadata": {"big": 1180591620717411303424, "neg": -18446744073709551617}}]}'
    metadata = _decode(body)["items"][0]["metadata"]
    assert metadata == {"big": 2**70, "neg": -(2**64) - 1}
    assert isinstance(metadata["big"], int)
