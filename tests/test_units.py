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
        ("1e3", 1000),  # numbers as Python writes them
        ("1.5e3MiB", 1500 * 2**20),
        (".5GiB", 2**29),
        ("1024TiB", 2**50),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GiB", "12 parsecs", "1PiB", "e3GiB", "1e3e3GiB"])
def test_parse_size_rejects_with_the_value_and_units(bad):
    with pytest.raises(InvalidInputError, match="not understood"):
        parse_size(bad)


@pytest.mark.parametrize(("bad", "fix"), [("-3GiB", "'3GiB'"), ("-1e3", "'1e3'")])
def test_a_negative_size_text_is_named_as_negative(bad, fix):
    with pytest.raises(InvalidInputError, match=rf"'{bad}' is negative.*0 or more.*{fix}"):
        parse_size(bad)


@pytest.mark.parametrize("bad", ["1025TiB", "1e30GiB", "1e999999999GiB", 2**50 + 1])
def test_a_size_past_any_memory_is_refused_without_making_it(bad):
    with pytest.raises(InvalidInputError, match=r"more than 1 PiB.*check the number and the unit"):
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
