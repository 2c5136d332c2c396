"""Layouts: the text form, decode, compose and the run-out instant, checked
against the `idmint` binary's own decode for every preset."""

import datetime
import json
import pathlib
import subprocess

import idmint
import pytest

UTC = datetime.timezone.utc

# The one file of layout test vectors every binding reads (generated from
# the Rust core): each row an ID and the parts and time it decodes into.
VECTORS_FILE = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "layout-vectors.tsv"
VECTORS = [
    (fields[0], *map(int, fields[1:]))
    for fields in (
        line.split("\t") for line in VECTORS_FILE.read_text().splitlines() if line and not line.startswith("#")
    )
]
# Every preset, with an epoch moved where the preset has run out already,
# and a custom layout: the layouts of the vectors.
LAYOUTS = list(dict.fromkeys(row[0] for row in VECTORS))


@pytest.mark.parametrize("row", VECTORS, ids=lambda row: f"{row[0]}:{row[1]}")
def test_decode_and_compose_give_the_vectors(row):
    text, id, unix_ms, tick, datacenter, worker, rollback, sequence = row
    layout = idmint.Layout(text)
    d = layout.decode(id)
    assert (d.id, d.timestamp_ms, d.tick, d.datacenter, d.worker, d.rollback, d.sequence) == (
        id,
        unix_ms,
        tick,
        datacenter,
        worker,
        rollback,
        sequence,
    )
    parts = dict(tick=tick, datacenter=datacenter, worker=worker, rollback=rollback, sequence=sequence)
    assert layout.compose(**parts) == id


def test_the_vectors_cover_every_preset():
    assert len(VECTORS) >= 3 * len(LAYOUTS)
    assert {"twitter", "leaf", "sonyflake", "discord", "instagram", "js53", "tso"} <= set(LAYOUTS)


def cli_decode(idmint_bin, layout, id):
    out = subprocess.run(
        [idmint_bin, "decode", "--json", "--layout", layout, str(id)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


@pytest.mark.parametrize("text", LAYOUTS)
def test_decode_agrees_with_idmint_decode(text, idmint_bin):
    layout = idmint.Layout(text)
    worker = 0 if layout.workers == 1 else 1  # tso has no node field
    g = idmint.Generator(layout, worker=worker)
    ids = [g.next_id()] + g.next_ids(3)
    # One composed at a time and parts of our own choosing too.
    ids.append(layout.compose(time=datetime.datetime(2025, 6, 1, 12, 0, tzinfo=UTC), worker=worker, sequence=2))
    for id in ids:
        mine = layout.decode(id)
        cli = cli_decode(idmint_bin, text, id)
        assert str(mine.id) == cli["id"]
        assert mine.timestamp_ms == cli["unix_ms"]
        assert mine.time == datetime.datetime.fromisoformat(cli["time"].replace("Z", "+00:00"))
        assert mine.time.tzinfo is not None
        assert (mine.tick, mine.datacenter, mine.worker, mine.rollback, mine.sequence) == (
            cli["tick"],
            cli["datacenter"],
            cli["worker"],
            cli["rollback"],
            cli["sequence"],
        )
        assert mine.worker == worker


def test_compose_round_trips_and_names_bad_parts():
    twitter = idmint.Layout("twitter")
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    id = twitter.compose(time=at, datacenter=3, worker=7, sequence=42)
    d = twitter.decode(id)
    assert (d.time, d.datacenter, d.worker, d.sequence) == (at, 3, 7, 42)
    assert twitter.compose(tick=d.tick, datacenter=3, worker=7, sequence=42) == id
    with pytest.raises(idmint.IdmintError) as e:
        twitter.compose(tick=1, worker=32)
    assert e.value.code == "node_out_of_range"
    with pytest.raises(idmint.IdmintError) as e:
        twitter.compose(time=datetime.datetime(2001, 1, 1, tzinfo=UTC))
    assert e.value.code == "clock_before_epoch"
    with pytest.raises(ValueError):
        twitter.compose(time=datetime.datetime(2026, 1, 1))  # naive
    with pytest.raises(TypeError):
        twitter.compose()


def test_run_out_and_text_form():
    baidu = idmint.Layout("baidu")
    assert baidu.runs_out_at == datetime.datetime(2024, 11, 20, 13, 24, 16, tzinfo=UTC)
    assert baidu.preset == "baidu"
    assert idmint.Layout(str(baidu)) == baidu
    assert idmint.Layout("twitter").ids_per_second_per_worker == 4_096_000
    assert idmint.Layout("twitter").workers == 1024
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator("baidu", worker=1).next_id()
    assert e.value.code == "layout_exhausted"
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Layout("twitter,sequence=twelve")
    assert e.value.code == "invalid_layout_text"
    assert "twelve" in e.value.message
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Layout("twitter").decode(1 << 63)
    assert e.value.code == "invalid_id"
