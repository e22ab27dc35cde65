"""`prd_jax.model.chunks`: the chunk layout, hand-written."""

import numpy as np

from prd_jax.model.chunks import join_chunks, split_chunks


def test_split_and_join_hand_layout():
    x = np.arange(10).reshape(2, 5)  # rows 0..4 and 5..9
    chunks = np.asarray(split_chunks(x, 2))
    assert chunks.tolist() == [[[0, 1], [5, 6]], [[2, 3], [7, 8]], [[4, 0], [9, 0]]]  # tail zero-padded
    assert np.asarray(join_chunks(chunks, 5)).tolist() == x.tolist()
    assert np.asarray(join_chunks(chunks, 3)).tolist() == [[0, 1, 2], [5, 6, 7]]
    assert split_chunks(np.zeros((2, 6, 3)), 3).shape == (2, 2, 3, 3)  # trailing axes kept
