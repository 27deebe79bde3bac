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
