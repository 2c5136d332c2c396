"""What the README states against what the library does: the limits of a
batch, each read from the embedded layer's one constant."""

import re

import idmint
import pytest

from conftest import REPO

README = (REPO / "bindings" / "python" / "README.md").read_text()


def stated(name):
    """The number the README gives beside `idmint.<name>`."""
    found = re.findall(rf"`idmint\.{name}`[^(]*\(([\d,]+)\)", README)
    assert found, f"the README names no `idmint.{name}` with its value"
    return {int(n.replace(",", "")) for n in found}


def test_the_readme_states_the_generator_batch_limit():
    assert stated("MAX_BATCH") == {idmint.MAX_BATCH}
    with idmint.Generator(layout="twitter,epoch=2022-02-02", worker=1) as g:
        with pytest.raises(idmint.IdmintError) as e:
            g.next_ids(idmint.MAX_BATCH + 1)
        assert e.value.code == "invalid_count"


def test_the_readme_states_the_segment_batch_limit(config, monkeypatch):
    assert stated("DEFAULT_MAX_COUNT") == {idmint.DEFAULT_MAX_COUNT}
    with idmint.Segments.from_config(config("[segment.keys.order]\nstep = 1000\n")) as s:
        assert s.max_count == idmint.DEFAULT_MAX_COUNT
        assert len(s.next_ids("order", s.max_count)) == s.max_count
        with pytest.raises(idmint.IdmintError) as e:
            s.next_ids("order", s.max_count + 1)
        assert e.value.code == "invalid_count"
    # The config's own, where it sets one.
    monkeypatch.setenv("IDMINT_SERVER__MAX_COUNT", "7")
    with idmint.Segments.from_config(config("[segment.keys.order]\nstep = 10\n", name="seven.toml")) as s:
        assert s.max_count == 7
