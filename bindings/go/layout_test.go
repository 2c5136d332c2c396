package idmint_test

// Layouts: the text form, decode, compose and the run-out instant, checked
// against the `idmint` binary's own decode for every preset.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	idmint "github.com/idmint/idmint/bindings/go"
)

// readVectors reads the one file of layout test vectors every binding reads
// (generated from the Rust core): each row an ID and the parts and time it
// decodes into, as text fields.
func readVectors(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "layout-vectors.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			rows = append(rows, strings.Split(line, "\t"))
		}
	}
	return rows
}

// vectorLayouts is every preset, with an epoch moved where the preset has
// run out already, and a custom layout: the layouts of the vectors.
func vectorLayouts(t *testing.T) []string {
	var out []string
	seen := map[string]bool{}
	for _, row := range readVectors(t) {
		if !seen[row[0]] {
			seen[row[0]] = true
			out = append(out, row[0])
		}
	}
	return out
}

func TestDecodeAndComposeGiveTheLayoutVectors(t *testing.T) {
	rows := readVectors(t)
	if len(rows) < 3*len(vectorLayouts(t)) {
		t.Fatalf("%d vectors", len(rows))
	}
	for _, row := range rows {
		layout, err := idmint.ParseLayout(row[0])
		if err != nil {
			t.Fatal(err)
		}
		n := make([]uint64, 7)
		for i := range n {
			if n[i], err = strconv.ParseUint(row[i+1], 10, 64); err != nil {
				t.Fatal(err)
			}
		}
		d, err := layout.Decode(int64(n[0]))
		if err != nil {
			t.Fatal(err)
		}
		got := []uint64{uint64(d.ID), uint64(d.Time.UnixMilli()), d.Tick, uint64(d.Datacenter), uint64(d.Worker), uint64(d.Rollback), uint64(d.Sequence)}
		for i := range n {
			if got[i] != n[i] {
				t.Errorf("%s %s: decoded %v, want %v", row[0], row[1], got, n)
				break
			}
		}
		id, err := layout.Compose(idmint.IDParts{Tick: n[2], Datacenter: uint32(n[3]), Worker: uint32(n[4]), Rollback: uint32(n[5]), Sequence: uint32(n[6])})
		if err != nil || uint64(id) != n[0] {
			t.Errorf("%s: compose gave %d (%v), want %d", row[0], id, err, n[0])
		}
	}
}

type cliDecoded struct {
	ID         string `json:"id"`
	UnixMs     int64  `json:"unix_ms"`
	Time       string `json:"time"`
	Tick       uint64 `json:"tick"`
	Datacenter uint32 `json:"datacenter"`
	Worker     uint32 `json:"worker"`
	Rollback   uint32 `json:"rollback"`
	Sequence   uint32 `json:"sequence"`
}

func TestDecodeAgreesWithIdmintDecode(t *testing.T) {
	bin := idmintBin(t)
	for _, text := range vectorLayouts(t) {
		t.Run(text, func(t *testing.T) {
			layout, err := idmint.ParseLayout(text)
			if err != nil {
				t.Fatal(err)
			}
			worker := uint32(1)
			if layout.Workers() == 1 {
				worker = 0 // tso has no node field
			}
			g, err := idmint.NewGenerator(idmint.Options{Layout: text, Worker: worker})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			first, err := g.NextID()
			if err != nil {
				t.Fatal(err)
			}
			batch, err := g.NextIDs(3)
			if err != nil {
				t.Fatal(err)
			}
			// One composed from parts of our own choosing too.
			tick, err := layout.TickAt(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
			if err != nil {
				t.Fatal(err)
			}
			composed, err := layout.Compose(idmint.IDParts{Tick: tick, Worker: worker, Sequence: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range append([]int64{first, composed}, batch...) {
				mine, err := layout.Decode(id)
				if err != nil {
					t.Fatal(err)
				}
				out, err := exec.Command(bin, "decode", "--json", "--layout", text, strconv.FormatInt(id, 10)).Output()
				if err != nil {
					t.Fatalf("idmint decode: %v", err)
				}
				var cli cliDecoded
				if err := json.Unmarshal(out, &cli); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				cliTime, err := time.Parse(time.RFC3339Nano, cli.Time)
				if err != nil {
					t.Fatal(err)
				}
				if strconv.FormatInt(mine.ID, 10) != cli.ID || mine.Time.UnixMilli() != cli.UnixMs ||
					!mine.Time.Equal(cliTime) || mine.Time.Location() != time.UTC ||
					mine.Tick != cli.Tick || mine.Datacenter != cli.Datacenter || mine.Worker != cli.Worker ||
					mine.Rollback != cli.Rollback || mine.Sequence != cli.Sequence {
					t.Fatalf("mine %+v, idmint decode %+v", mine, cli)
				}
				if mine.Worker != worker {
					t.Fatalf("worker %d", mine.Worker)
				}
			}
		})
	}
}

func TestComposeRoundTripsAndNamesBadParts(t *testing.T) {
	twitter, err := idmint.ParseLayout("twitter")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	tick, err := twitter.TickAt(at)
	if err != nil {
		t.Fatal(err)
	}
	id, err := twitter.Compose(idmint.IDParts{Tick: tick, Datacenter: 3, Worker: 7, Sequence: 42})
	if err != nil {
		t.Fatal(err)
	}
	d, err := twitter.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Time.Equal(at) || d.Datacenter != 3 || d.Worker != 7 || d.Sequence != 42 || d.Tick != tick {
		t.Fatalf("%+v", d)
	}
	_, err = twitter.Compose(idmint.IDParts{Tick: 1, Worker: 32})
	if c := code(t, err); c != "node_out_of_range" {
		t.Fatal(c)
	}
	_, err = twitter.TickAt(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	if c := code(t, err); c != "clock_before_epoch" {
		t.Fatal(c)
	}
	_, err = twitter.Decode(-1)
	if c := code(t, err); c != "invalid_id" {
		t.Fatal(c)
	}
}

func TestRunOutAndTextForm(t *testing.T) {
	baidu, err := idmint.ParseLayout("baidu")
	if err != nil {
		t.Fatal(err)
	}
	end, ok := baidu.RunsOutAt()
	if !ok || !end.Equal(time.Date(2024, 11, 20, 13, 24, 16, 0, time.UTC)) {
		t.Fatalf("runs out at %v %v", end, ok)
	}
	if baidu.Preset() != "baidu" || baidu.Unit() != time.Second {
		t.Fatalf("%q %v", baidu.Preset(), baidu.Unit())
	}
	again, err := idmint.ParseLayout(baidu.String())
	if err != nil || !again.Equal(baidu) {
		t.Fatalf("%v %v", again, err)
	}
	twitter, _ := idmint.ParseLayout("twitter")
	if twitter.IDsPerSecondPerWorker() != 4_096_000 || twitter.Workers() != 1024 {
		t.Fatalf("%v %v", twitter.IDsPerSecondPerWorker(), twitter.Workers())
	}
	custom, _ := idmint.ParseLayout("time=39,unit=10ms,epoch=2024-01-01,worker=16,sequence=8")
	if custom.Preset() != "" || custom.Unit() != 10*time.Millisecond {
		t.Fatalf("%q %v", custom.Preset(), custom.Unit())
	}
	_, err = idmint.ParseLayout("twitter,sequence=twelve")
	if e := asError(t, err); e.Code != "invalid_layout_text" || !strings.Contains(e.Message, "twelve") {
		t.Fatalf("%+v", e)
	}
	_, err = twitter.Decode(int64(-1 << 63))
	if c := code(t, err); c != "invalid_id" {
		t.Fatal(c)
	}
}
