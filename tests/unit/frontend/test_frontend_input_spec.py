"""Parsing of the CLI's --input NAME:SHAPE and --input-file NAME=PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from polytf.frontend import parse_bucket_spec, parse_input_file_spec, parse_input_spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x:1,784", ("x", (1, 784))),
        ("input_1:32,32,32,3", ("input_1", (32, 32, 32, 3))),
        ("x:", ("x", ())),
        ("x:7", ("x", (7,))),
        ("x:0:1,784", ("x:0", (1, 784))),  # the LAST ':' splits
        ("scope/in:1, 2, 3", ("scope/in", (1, 2, 3))),
        (" x : [1,784] ", ("x", (1, 784))),
        ("x:(2,3)", ("x", (2, 3))),
        ("x:1,784,", ("x", (1, 784))),
        ("x:0,5", ("x", (0, 5))),
        ("x:N,784", ("x", ("N", 784))),  # a size symbol, known at the call
        ("ids:N=1..64, S", ("ids", ("N=1..64", "S"))),
        ("x:N = ..8,3", ("x", ("N=1..8", 3))),
    ],
)
def test_parse_input_spec(text: str, expected) -> None:
    assert parse_input_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("x", "no ':'"),
        (":1,2", "no name"),
        ("x:1,,2", "empty dimension"),
        ("x:1,3a", "'3a' is neither an integer nor a size symbol"),
        ("x:1.5", "neither an integer nor a size symbol"),
        ("x:N=0..4,3", "must start at 1"),
        ("x:N=5..4,3", "range 5..4 is empty"),
        ("x:-1,784", "negative"),
        ("", "no ':'"),
    ],
)
def test_parse_input_spec_errors(text: str, words: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_input_spec(text)
    message = str(info.value)
    assert words in message
    assert "NAME:SHAPE" in message and "x:1,784" in message


def test_parse_input_file_spec() -> None:
    assert parse_input_file_spec("x=data.npy") == ("x", Path("data.npy"))
    assert parse_input_file_spec("input:0=/tmp/a=b.npy") == ("input:0", Path("/tmp/a=b.npy"))
    for bad, words in [("x", "no '='"), ("=a.npy", "no name"), ("x=", "no path")]:
        with pytest.raises(ValueError, match=words):
            parse_input_file_spec(bad)


def test_parse_bucket_spec() -> None:
    assert parse_bucket_spec("N=1,8,32") == ("N", (1, 8, 32))
    assert parse_bucket_spec(" S = 64, 64 ,128") == ("S", (64, 128))
    for text, words in (("N", "SYMBOL=SIZES"), ("=1", "SYMBOL=SIZES"), ("N=0", "'0' is not a whole number"), ("N=1,x", "'x'")):
        with pytest.raises(ValueError, match=words):
            parse_bucket_spec(text)
