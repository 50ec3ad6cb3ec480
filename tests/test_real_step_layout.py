"""Real mode's step preparation: where a step's packed tokens go (positions, slots, block
tables), laid out before the forward pass runs."""

from __future__ import annotations

from kvplan.core.sequence import Sequence
from kvplan.real.runner import lay_out
from kvplan.workload.request import Request


def sequence(
    request_id: int, prompt: int, computed: int, generated: int, table: list[int]
) -> Sequence:
    seq = Sequence(Request(request_id, 0.0, prompt, 8))
    seq.num_computed, seq.num_generated, seq.block_table = computed, generated, table
    return seq


def test_decode_tokens_lead_and_each_token_gets_its_slot_through_the_block_table() -> None:
    decoding = sequence(
        0, prompt=5, computed=5, generated=1, table=[7, 2]
    )  # its 6th token, in block 2
    prefilling = sequence(
        1, prompt=6, computed=0, generated=0, table=[3, 9]
    )  # 4 of 6 prompt tokens
    layout = lay_out([(decoding, 1), (prefilling, 4)], block_size=4, eviction=None)
    assert layout.num_decode == 1 and not layout.contiguous
    assert layout.positions.tolist() == [5, 0, 1, 2, 3]
    assert layout.slots.tolist() == [2 * 4 + 1, 12, 13, 14, 15]
    assert layout.tables.tolist() == [[7, 2], [3, -1]]  # only the blocks the step reaches
    assert layout.first_index.tolist() == [0, 1] and layout.slot_ends.tolist() == [6, 4]
    assert layout.done.tolist() == [
        True,
        False,
    ]  # the prefill chunk does not reach the prompt's end


def test_a_contiguous_extent_is_a_table_of_one_slot_blocks() -> None:
    seq = sequence(0, prompt=3, computed=0, generated=0, table=[])
    seq.extent = (40, 8)
    layout = lay_out([(seq, 3)], block_size=16, eviction=None)
    assert layout.contiguous and layout.tables.tolist() == [[40, 41, 42]]
    assert layout.slots.tolist() == [40, 41, 42] and layout.done.tolist() == [True]
