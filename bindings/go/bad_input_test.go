package idmint_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	idmint "github.com/idmint/idmint/bindings/go"
)

// The shared bad-input vectors (bindings/testdata/bad-input.tsv, rendered
// from idmint-embed): a count or a public-ID setting every language checks
// in idmint alone, so each answers with the same code and the same words.
func TestBadInputIsAnsweredAsInEveryLanguage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "bad-input.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const key = "000102030405060708090a0b0c0d0e0f"
	rows := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rows++
		f := strings.Split(line, "\t")
		kase, code, message := f[0], f[2], f[3]
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatal(err)
		}
		switch kase {
		case "next_ids":
			_, err = g.NextIDs(n)
		case "public_ids.bits":
			_, err = idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, Bits: n})
		case "public_ids.key_id_bits":
			_, err = idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, KeyIDBits: n})
		case "public_ids.active_key":
			_, err = idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key, ActiveKey: &n})
		default:
			t.Fatalf("unknown case %s", kase)
		}
		if e := asError(t, err); e.Code != code || e.Message != message {
			t.Errorf("%s %d: got %s: %s, want %s: %s", kase, n, e.Code, e.Message, code, message)
		}
	}
	if rows < 6 {
		t.Fatalf("%d vectors", rows)
	}
}
