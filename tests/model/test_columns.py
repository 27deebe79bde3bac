"""The string pool every column batch shares."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tacit.model.columns import NONE, StringPool


@given(st.lists(st.text(max_size=3), max_size=20), st.lists(st.integers(-1, 25), max_size=30))
def test_names_are_the_pools_strings_of_the_codes(values, wanted):
    pool = StringPool(values)
    codes = np.array([c for c in wanted if c < len(pool)], dtype=np.int32)
    assert pool.names(codes) == [pool[int(c)] for c in codes]
    assert pool.names(np.array([NONE])) == [None]
    objects, none = pool.objects(codes, np.array([NONE]))
    assert objects.dtype == object and objects.tolist() == pool.names(codes)
    assert none.tolist() == [None]


@given(
    st.lists(st.text(max_size=2), max_size=10),
    st.lists(st.none() | st.text(max_size=2), max_size=30),
)
def test_codes_are_the_code_of_each_value_interned_in_order(known, values):
    pool, twin = StringPool(known), StringPool(known)
    assert pool.codes(values) == [twin.code(v) for v in values]
    assert pool.values == twin.values
