"""The one label-matcher parser: equality only, escapes kept, strict about empty matchers."""

from __future__ import annotations

import pytest

from fleetwatch.core.profiles import PROFILES
from fleetwatch.core.promql import (
    MatcherError,
    equality_labels,
    format_matchers,
    parse_matchers,
)


def test_empty_text_is_no_matchers():
    assert parse_matchers("") == {}
    assert equality_labels("") == {}


def test_matchers_in_order():
    got = parse_matchers('status="error",model="llama-3",le="0.5"')
    assert got == {"status": "error", "model": "llama-3", "le": "0.5"}
    assert list(got) == ["status", "model", "le"]


@pytest.mark.parametrize(
    "text",
    [
        'a="1",b="2"',
        ' a="1" , b="2" ',
        'a = "1",b =  "2"',
        '\ta="1",\n b="2"\n',
    ],
)
def test_blanks_around_names_signs_values_and_commas_are_ignored(text):
    assert parse_matchers(text) == {"a": "1", "b": "2"}


def test_blanks_inside_a_value_are_kept():
    assert parse_matchers('a=" x y "') == {"a": " x y "}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (r'a="say \"hi\""', r"say \"hi\""),
        (r'a="back\\slash"', r"back\\slash"),
        (r'a="ends with \\"', "ends with \\\\"),
        (r'a="\n"', r"\n"),
        ('a=""', ""),
    ],
)
def test_escapes_are_kept_as_written(text, value):
    assert parse_matchers(text) == {"a": value}


@pytest.mark.parametrize(
    "text",
    [
        'a!="1"',
        'a=~"1|2"',
        'a!~"1"',
        'a="1",b!="2"',
        'a="1",b=~"2"',
    ],
)
def test_only_equality_is_accepted(text):
    with pytest.raises(MatcherError):
        parse_matchers(text)
    assert equality_labels(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "a=1",
        "a='1'",
        'a="1',
        r'a="1\"',
        'a="1"x',
        'a="x"y"',
        '1a="1"',
        'a-b="1"',
        '="1"',
        "a",
        'a="x,y"',
    ],
)
def test_malformed_matchers_are_rejected(text):
    with pytest.raises(MatcherError):
        parse_matchers(text)
    assert equality_labels(text) is None


@pytest.mark.parametrize("text", ['a="1",', ',a="1"', 'a="1",,b="2"', 'a="1", ,b="2"', " ", ","])
def test_empty_matchers_are_rejected_the_stricter_rule(text):
    # The fleet parser used to skip these; the SLO parser rejected them, and its rule is kept.
    with pytest.raises(MatcherError):
        parse_matchers(text)
    assert equality_labels(text) is None


def test_the_error_names_the_matcher():
    with pytest.raises(MatcherError) as caught:
        parse_matchers('a="1",  b!="2" ')
    assert caught.value.part == 'b!="2"'
    assert str(caught.value) == """unsupported label matcher 'b!="2"' (only name="value")"""
    assert isinstance(caught.value, ValueError)


def test_a_name_given_twice_keeps_its_last_value():
    assert parse_matchers('a="1",a="2"') == {"a": "2"}


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"status": "error"},
        {"a": "1", "b": "two", "_c9": ""},
        {"q": r"say \"hi\"", "p": r"C:\\dir"},
    ],
)
def test_format_then_parse_round_trips(labels):
    text = format_matchers(labels)
    assert parse_matchers(text) == labels
    assert list(parse_matchers(text)) == list(labels)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ('status="error"', 'status="error"'),
        (' a = "1" , b="x y" ', 'a="1",b="x y"'),
        (r'a="q\"q"', r'a="q\"q"'),
    ],
)
def test_parse_then_format_gives_the_canonical_text(text, canonical):
    assert format_matchers(parse_matchers(text)) == canonical
    assert format_matchers(parse_matchers(canonical)) == canonical


def test_format_matchers_writes_values_verbatim():
    assert format_matchers({"a": "1", "le": "+Inf"}) == 'a="1",le="+Inf"'


def test_every_builtin_profile_matcher_parses():
    refs = [
        ref
        for p in PROFILES.values()
        for ref in (
            *p.signals.values(),
            p.outcomes.total,
            p.outcomes.good,
            *p.outcomes.bad.values(),
        )
        if ref is not None
    ]
    assert any(ref.matchers for ref in refs)
    for ref in refs:
        assert format_matchers(parse_matchers(ref.matchers)) == ref.matchers
