"""The shared bad-input vectors (bindings/testdata/bad-input.tsv, rendered
from idmint-embed): a count or a public-ID setting every language checks in
embed alone, so each answers with the same code and the same words."""

from pathlib import Path

import pytest

import idmint

KEY = "000102030405060708090a0b0c0d0e0f"
VECTORS = [
    line.split("\t")
    for line in (Path(__file__).parents[2] / "testdata" / "bad-input.tsv")
    .read_text()
    .splitlines()
    if line and not line.startswith("#")
]


@pytest.mark.parametrize(("case", "value", "code", "message"), VECTORS)
def test_bad_input_is_answered_as_in_every_language(case, value, code, message):
    n = int(value)
    with idmint.Generator() as g:
        with pytest.raises(idmint.IdmintError) as e:
            if case == "next_ids":
                g.next_ids(n)
            elif case.startswith("public_ids."):
                idmint.PublicIds(KEY, **{case.removeprefix("public_ids."): n})
            else:
                pytest.fail(f"unknown case {case}")
    assert (e.value.code, e.value.message) == (code, message)
    assert str(e.value) == f"{code}: {message}"


def test_the_vectors_are_there():
    assert len(VECTORS) >= 6
