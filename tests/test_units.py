import pytest

from memfit import InvalidInputError, format_bytes, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24GiB", 24 * 2**30),
        ("24GB", 24 * 10**9),
        ("24000MiB", 24000 * 2**20),
        ("1.5 GiB", int(1.5 * 2**30)),
        ("123", 123),
        (4096, 4096),
        ("80gb", 80 * 10**9),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GiB", "12 parsecs", "-3GiB", "1e3"])
def test_parse_size_rejects_with_the_value_and_units(bad):
    with pytest.raises(InvalidInputError, match="not understood"):
        parse_size(bad)


def test_parse_size_rejects_negative_int_and_bool():
    with pytest.raises(InvalidInputError, match="negative"):
        parse_size(-1)
    with pytest.raises(InvalidInputError, match="not a size"):
        parse_size(True)


def test_format_bytes_binary_units():
    assert format_bytes(512) == "512 B"
    assert format_bytes(2048) == "2.00 KiB"
    assert format_bytes(17 * 2**30 + 2**29) == "17.50 GiB"
    assert format_bytes(-3 * 2**20) == "-3.00 MiB"
