"""Public IDs: round trips in every text form, and agreement with `idmint
obfuscate` for the same key."""

import subprocess

import idmint
import pytest

KEY = "000102030405060708090a0b0c0d0e0f"


@pytest.mark.parametrize("fmt", ["dec", "base32", "sqids"])
def test_round_trips(fmt):
    p = idmint.PublicIds(KEY, format=fmt)
    g = idmint.Generator("twitter", worker=3)
    for id in g.next_ids(1000):
        public = p.obfuscate(id)
        assert public != id and public < 1 << 63
        assert p.reveal(public) == id
        text = p.obfuscate_text(id)
        assert p.decode(text) == public
        assert p.reveal_text(text) == id
    assert p.format == fmt


def test_agrees_with_idmint_obfuscate(idmint_bin):
    p = idmint.PublicIds(KEY, format="base32")
    ids = [1, 42, 1_050_118_621_198_921_728, (1 << 63) - 1]
    out = subprocess.run(
        [idmint_bin, "obfuscate", "--format", "base32", *map(str, ids)],
        check=True,
        capture_output=True,
        text=True,
        env={"IDMINT_OBFUSCATION_KEY": KEY, "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    assert out == [p.obfuscate_text(id) for id in ids]


def test_rotation_and_errors(config):
    ring = f"0:{KEY} 1:8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0"
    old = idmint.PublicIds(f"0:{KEY}", bits=64, key_id_bits=1)
    new = idmint.PublicIds(ring, bits=64, key_id_bits=1)
    made_by_old = old.obfuscate(12345)
    assert new.reveal(made_by_old) == 12345
    assert new.reveal(new.obfuscate(12345)) == 12345
    with pytest.raises(idmint.IdmintError) as e:
        old.reveal(new.obfuscate(12345))
    assert e.value.code == "unknown_key_id"
    with pytest.raises(idmint.IdmintError) as e:
        idmint.PublicIds("abc")
    assert e.value.code == "invalid_key"  # docs/api.md: the library's malformed key
    assert "abc" not in e.value.message  # a key never shows in errors
    with pytest.raises(idmint.IdmintError) as e:
        idmint.PublicIds(KEY, format="sqids").decode("not!sqids")
    assert e.value.code == "invalid_public_id"
    path = config(f'[obfuscation]\nkey = "{KEY}"\nformat = "sqids"\n')
    from_file = idmint.PublicIds.from_config(path)
    assert from_file.obfuscate_text(77) == idmint.PublicIds(KEY, format="sqids").obfuscate_text(77)


@pytest.mark.parametrize("ring", ["zz", "0:zz", "x:" + KEY, ""])
def test_a_malformed_key_is_invalid_key(ring, config):
    with pytest.raises(idmint.IdmintError) as e:
        idmint.PublicIds(ring)
    assert e.value.code == "invalid_key"
    with pytest.raises(idmint.IdmintError) as e:
        idmint.PublicIds(KEY, format="hex")
    assert e.value.code == "invalid_obfuscator"
    # In a config file it is a setting like any other.
    with pytest.raises(idmint.IdmintError) as e:
        idmint.PublicIds.from_config(config(f'[obfuscation]\nkey = "{ring or "zz"}"\n'))
    assert e.value.code == "invalid_config"
