package idmint_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	idmint "github.com/idmint/idmint/bindings/go"
)

// One worker ID, one live generator per process: a second generator whose
// IDs would overlap a live one's fails with worker_taken, fixed or from a
// config, whatever the preset is called; closing the first frees it.
func TestASecondLiveGeneratorOfOneWorkerIsRefused(t *testing.T) {
	first, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := first.NextIDs(1000)
	if err != nil {
		t.Fatal(err)
	}
	_, err = idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 1})
	if e := asError(t, err); e.Code != "worker_taken" || !strings.Contains(e.Message, "worker ID 1") || e.Retryable {
		t.Fatalf("%+v", e)
	}
	// The same bits by another name: leaf's one 10-bit node field with
	// Twitter's epoch; its worker 1 is twitter's datacenter 0, worker 1.
	_, err = idmint.NewGenerator(idmint.Options{Layout: "leaf", Worker: 1})
	if c := code(t, err); c != "worker_taken" {
		t.Fatal(c)
	}
	other, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 1, Datacenter: 1})
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := other.NextIDs(1000)
	seen := map[int64]bool{}
	for _, id := range theirs {
		seen[id] = true
	}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("%d from both", id)
		}
	}
	other.Close()
	first.Close()
	again, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := again.NextID(); id <= ids[999] {
		t.Fatalf("%d after %d", id, ids[999])
	}
	again.Close()
}

func TestAGeneratorFromAConfigJoinsTheCheck(t *testing.T) {
	path := config(t, "[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\nworker = 6\n")
	fixed, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 6})
	if err != nil {
		t.Fatal(err)
	}
	_, err = idmint.GeneratorFromConfig(path)
	if c := code(t, err); c != "worker_taken" {
		t.Fatal(c)
	}
	fixed.Close()
	leased, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 6})
	if c := code(t, err); c != "worker_taken" {
		t.Fatal(c)
	}
	leased.Close()
	g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 6})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
}

// stated is the numbers the README gives beside name.
func stated(t *testing.T, name string) map[int]bool {
	text, err := os.ReadFile(filepath.Join(repo(), "bindings", "go", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[int]bool{}
	re := regexp.MustCompile("`" + regexp.QuoteMeta(name) + "`[^(]*\\(([\\d,]+)\\)")
	for _, m := range re.FindAllStringSubmatch(string(text), -1) {
		n, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
		if err != nil {
			t.Fatal(err)
		}
		found[n] = true
	}
	if len(found) == 0 {
		t.Fatalf("the README names no `%s` with its value", name)
	}
	return found
}

// The README states the limits the library has, each read from the
// embedded layer's one constant.
func TestTheReadmeStatesTheBatchLimits(t *testing.T) {
	if got := stated(t, "MaxBatch"); len(got) != 1 || !got[idmint.MaxBatch] {
		t.Fatalf("README says %v, MaxBatch is %d", got, idmint.MaxBatch)
	}
	if got := stated(t, "DefaultMaxCount"); len(got) != 1 || !got[idmint.DefaultMaxCount] {
		t.Fatalf("README says %v, DefaultMaxCount is %d", got, idmint.DefaultMaxCount)
	}
	s, err := idmint.SegmentsFromConfig(config(t, "[segment.keys.order]\nstep = 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.MaxCount() != idmint.DefaultMaxCount {
		t.Fatalf("MaxCount %d", s.MaxCount())
	}
	if ids, err := s.NextIDs("order", s.MaxCount()); err != nil || len(ids) != s.MaxCount() {
		t.Fatalf("%d IDs, %v", len(ids), err)
	}
	_, err = s.NextIDs("order", s.MaxCount()+1)
	if c := code(t, err); c != "invalid_count" {
		t.Fatal(c)
	}
}
