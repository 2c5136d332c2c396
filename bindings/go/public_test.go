package idmint_test

// Public IDs: round trips in every text form, and agreement with `idmint
// obfuscate` for the same key.

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	idmint "github.com/idmint/idmint/bindings/go"
)

const key = "000102030405060708090a0b0c0d0e0f"

func TestPublicIDsRoundTrip(t *testing.T) {
	g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ids, err := g.NextIDs(1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"dec", "base32", "sqids"} {
		p, err := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, Format: format})
		if err != nil {
			t.Fatal(err)
		}
		if p.Format() != format || p.Bits() != 63 {
			t.Fatalf("%s %d", p.Format(), p.Bits())
		}
		for _, id := range ids {
			public, err := p.Obfuscate(id)
			if err != nil || public == uint64(id) || public >= 1<<63 {
				t.Fatalf("%d -> %d %v", id, public, err)
			}
			if back, err := p.Reveal(public); err != nil || back != id {
				t.Fatalf("%d -> %d -> %d %v", id, public, back, err)
			}
			text, err := p.ObfuscateText(id)
			if err != nil {
				t.Fatal(err)
			}
			if read, err := p.Decode(text); err != nil || read != public {
				t.Fatalf("%q -> %d %v", text, read, err)
			}
			if back, err := p.RevealText(text); err != nil || back != id {
				t.Fatalf("%q -> %d %v", text, back, err)
			}
		}
	}
}

func TestPublicIDsAgreeWithIdmintObfuscate(t *testing.T) {
	bin := idmintBin(t)
	p, err := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, Format: "base32"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int64{1, 42, 1_050_118_621_198_921_728, 1<<63 - 1}
	args := []string{"obfuscate", "--format", "base32"}
	for _, id := range ids {
		args = append(args, strconv.FormatInt(id, 10))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"IDMINT_OBFUSCATION_KEY=" + key, "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	theirs := strings.Fields(string(out))
	for i, id := range ids {
		mine, err := p.ObfuscateText(id)
		if err != nil || mine != theirs[i] {
			t.Fatalf("%d: mine %q, idmint obfuscate %q (%v)", id, mine, theirs[i], err)
		}
	}
}

func TestRotationAndErrors(t *testing.T) {
	ring := "0:" + key + " 1:8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0"
	old, err := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: "0:" + key, Bits: 64, KeyIDBits: 1})
	if err != nil {
		t.Fatal(err)
	}
	current, err := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: ring, Bits: 64, KeyIDBits: 1})
	if err != nil {
		t.Fatal(err)
	}
	madeByOld, _ := old.Obfuscate(12345)
	if back, err := current.Reveal(madeByOld); err != nil || back != 12345 {
		t.Fatalf("%d %v", back, err)
	}
	byNew, _ := current.Obfuscate(12345)
	if back, err := current.Reveal(byNew); err != nil || back != 12345 {
		t.Fatalf("%d %v", back, err)
	}
	_, err = old.Reveal(byNew)
	if c := code(t, err); c != "unknown_key_id" {
		t.Fatal(c)
	}
	zero := 0
	pinned, err := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: ring, Bits: 64, KeyIDBits: 1, ActiveKey: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if byZero, _ := pinned.Obfuscate(12345); byZero != madeByOld {
		t.Fatalf("active key 0 made %d, key 0 alone %d", byZero, madeByOld)
	}
	// A malformed key: invalid_key, as docs/api.md says of the library.
	_, err = idmint.NewPublicIDs(idmint.PublicIDOptions{Key: "abc"})
	if e := asError(t, err); e.Code != "invalid_key" || strings.Contains(e.Message, "abc") {
		t.Fatalf("%+v", e) // a key never shows in errors
	}
	for _, ring := range []string{"zz", "0:zz", "x:" + key} {
		_, err = idmint.NewPublicIDs(idmint.PublicIDOptions{Key: ring})
		if c := code(t, err); c != "invalid_key" {
			t.Fatalf("%q: %s", ring, c)
		}
	}
	_, err = idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, Format: "hex"})
	if c := code(t, err); c != "invalid_obfuscator" {
		t.Fatal(c)
	}
	sq, _ := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, Format: "sqids"})
	_, err = sq.Decode("not!sqids")
	if c := code(t, err); c != "invalid_public_id" {
		t.Fatal(c)
	}
	_, err = sq.Obfuscate(-5)
	if c := code(t, err); c != "invalid_id" {
		t.Fatal(c)
	}
	path := config(t, fmt.Sprintf("[obfuscation]\nkey = %q\nformat = \"sqids\"\n", key))
	fromFile, err := idmint.PublicIDsFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fromFile.ObfuscateText(77)
	b, _ := sq.ObfuscateText(77)
	if a != b {
		t.Fatalf("%q != %q", a, b)
	}
}
