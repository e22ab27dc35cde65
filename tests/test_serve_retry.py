"""`Retry-After` of `prd-jax serve`'s 429 and 503 (`serve.app.retry_after_s`): whole seconds,
`ceil(rows ahead x mean service time / slots)` clamped to 1..60, checked on hand-computed
values; a real full queue's 429 is in tests/test_serve_api.py."""

import pytest

from prd_jax.serve.app import RETRY_AFTER_RANGE_S, retry_after_s


@pytest.mark.parametrize("rows,mean,slots,expected", [
    (0, 0.5, 4, 1),  # nothing ahead: the lower bound
    (4, 0.5, 4, 1),  # 4 * 0.5 / 4 = 0.5 -> 1
    (10, 0.5, 4, 2),  # 1.25 -> 2
    (24, 0.5, 4, 3),  # 3.0 -> 3
    (100, 0.5, 4, 13),  # 12.5 -> 13
    (1000, 0.5, 4, 60),  # 125 -> the upper bound
    (3, 2.0, 1, 6),  # one slot: 3 rows of 2 s each
    (5, None, 4, 1),  # no row finished yet: the lower bound
])
def test_retry_after_hand_computed(rows, mean, slots, expected):
    got = retry_after_s(rows, mean, slots)
    assert isinstance(got, int) and got == expected


@pytest.mark.parametrize("mean,slots", [(0.01, 32), (0.37, 4), (1.6, 1), (7.0, 8)])
def test_retry_after_is_an_integer_in_range_and_grows_with_the_queue(mean, slots):
    low, high = RETRY_AFTER_RANGE_S
    values = [retry_after_s(rows, mean, slots) for rows in range(2000)]
    assert all(isinstance(v, int) and low <= v <= high for v in values)
    assert values == sorted(values)  # non-decreasing in the rows ahead
    assert values[0] == low and values[-1] == min(high, -(-1999 * mean // slots))
