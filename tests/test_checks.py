"""wavygraph.checks and wavygraph.utils.one_line: the helpers behind the
one-line errors of layers, data sets, the config and the command line."""
import pytest
import torch

from wavygraph.checks import check_positive_int, is_int, out_of_range
from wavygraph.utils import one_line


@pytest.mark.parametrize("dtype, expected", [(torch.long, True), (torch.int32, True), (torch.uint8, True),
                                             (torch.bool, False), (torch.float32, False), (torch.complex64, False)])
def test_is_int(dtype, expected):
    assert is_int(torch.zeros(2, dtype=dtype)) is expected


def test_out_of_range_gives_min_and_max_only_when_an_entry_is_outside():
    assert out_of_range(torch.tensor([0, 3, 2]), 4) is None
    assert out_of_range(torch.tensor([0, 4, 2]), 4) == (0, 4)
    assert out_of_range(torch.tensor([-1, 9, 2]), 4) == (-1, 9)
    assert out_of_range(torch.tensor([5, 9]), None) is None and out_of_range(torch.tensor([5, -2]), None) == (-2, 5)
    assert out_of_range(torch.empty(2, 0, dtype=torch.long), 0) is None


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "2", None])
def test_check_positive_int_refuses(value):
    with pytest.raises(KeyError) as info:
        check_positive_int("heads", value, KeyError)
    assert info.value.args[0] == f"heads must be a positive integer, got {value!r}"


def test_check_positive_int_accepts_and_allows_zero():
    check_positive_int("heads", 1)
    check_positive_int("split", 0, allow_zero=True)
    with pytest.raises(ValueError, match=r"^split must be a non-negative integer, got -1$"):
        check_positive_int("split", -1, allow_zero=True)


def test_one_line_first_line_joined_and_typed():
    exc = OSError("  first line  \n\n   second \n")
    assert one_line(exc) == "first line  "
    assert one_line(exc, join=True) == "first line; second"
    assert one_line(exc, with_type=True) == "OSError: first line  "
    assert one_line(KeyError()) == one_line(KeyError(), with_type=True) == "KeyError"
