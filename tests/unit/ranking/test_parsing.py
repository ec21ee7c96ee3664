import pytest

from prism.ranking.parsing import UnparseableReply, parse_ranking


def test_a_clean_list_is_not_repaired():
    parsed = parse_ranking("[4, 1, 0, 2, 3]", 5, 5)
    assert parsed.indices == [4, 1, 0, 2, 3] and not parsed.repaired


def test_prose_and_fences_around_one_list_are_fine():
    parsed = parse_ranking("Here you go:\n```python\n[3, 1, 2]\n```", 10, 3)
    assert parsed.indices == [3, 1, 2] and not parsed.repaired


def test_duplicates_and_out_of_range_indices_are_dropped_and_reported():
    parsed = parse_ranking("[2, 2, 9, -1, 0]", 5, 5)
    assert parsed.indices == [2, 0]
    assert parsed.repaired
    assert any("repeated index 2" in p for p in parsed.problems)
    assert any("index 9" in p for p in parsed.problems) and any("index -1" in p for p in parsed.problems)
    assert any("2 indices where 5" in p for p in parsed.problems)


def test_extra_indices_are_cut_and_several_lists_take_the_last():
    parsed = parse_ranking("draft [1, 2] final [5, 4, 3, 2, 1, 0]", 6, 3)
    assert parsed.indices == [5, 4, 3] and parsed.repaired and len(parsed.problems) == 2


@pytest.mark.parametrize("reply", ["", "chunk three is best", "[]", "[99, 100]", "[a, b]", None])
def test_nothing_usable_raises(reply):
    with pytest.raises(UnparseableReply):
        parse_ranking(reply, 5, 5)
