package idmint_test

// Generators: fixed, leased from the file registry, PostgreSQL (idmint's
// table and uid-generator's WORKER_NODE) and etcd, two processes on one
// registry, a lease lost with its registry, many goroutines, and close.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	idmint "github.com/idmint/idmint/bindings/go"
)

func TestFixedGeneratorAndItsErrors(t *testing.T) {
	g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	a, err := g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	batch, err := g.NextIDs(10_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 10_000 || a >= batch[0] {
		t.Fatalf("batch of %d after %d starts at %d", len(batch), a, batch[0])
	}
	strictlyIncreasing(t, batch)
	d, err := g.Layout().Decode(a)
	if err != nil || d.Worker != 7 {
		t.Fatalf("decode: %+v %v", d, err)
	}
	if s, err := g.Status(); err != nil || s.Registry != "fixed" || s.Worker != 7 || s.Lease != "held" {
		t.Fatalf("status %+v %v", s, err)
	}

	for _, n := range []int{0, -1, idmint.MaxBatch + 1} {
		_, err = g.NextIDs(n)
		if e := asError(t, err); e.Code != "invalid_count" || e.Retryable || e.RetryAfter != 0 {
			t.Fatalf("NextIDs(%d): %+v", n, e)
		}
	}
	_, err = idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 32})
	if c := code(t, err); c != "node_out_of_range" {
		t.Fatal(c)
	}
	_, err = idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 1, ClockBehind: "sometimes"})
	if e := asError(t, err); e.Code != "invalid_text" || !strings.Contains(e.Message, "sometimes") {
		t.Fatalf("%+v", e)
	}
	_, err = idmint.NewGenerator(idmint.Options{Worker: 1})
	if c := code(t, err); c != "invalid_layout_text" {
		t.Fatal(c) // no layout is no default
	}
	// A preset that ran out: refused with its code, not a negative ID.
	baidu, err := idmint.NewGenerator(idmint.Options{Layout: "baidu", Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = baidu.NextID()
	if c := code(t, err); c != "layout_exhausted" {
		t.Fatal(c)
	}
}

func TestCloseTwiceIsHarmlessAndLaterCallsFailClosed(t *testing.T) {
	s, err := idmint.NewGenerator(idmint.Options{Layout: "sonyflake", Worker: 9, SequenceExhausted: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Layout().Decode(id); d.Worker != 9 {
		t.Fatalf("worker %d", d.Worker)
	}
	s.Close()
	s.Close()
	_, err = s.NextID()
	if e := asError(t, err); e.Code != "closed" || e.Error() != "closed: "+e.Message {
		t.Fatalf("%+v", e)
	}
	_, err = s.NextIDs(3)
	if c := code(t, err); c != idmint.CodeClosed {
		t.Fatal(c)
	}
	_, err = s.Status()
	if c := code(t, err); c != "closed" {
		t.Fatal(c)
	}
}

// Many goroutines on one generator: every ID distinct, each goroutine's own
// IDs increasing, and a Close racing with them turns calls into "closed".
func TestManyGoroutinesShareOneGenerator(t *testing.T) {
	g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 5})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 16, 5000
	got := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < each; j++ {
				var id int64
				var err error
				if j%100 == 0 {
					var b []int64
					b, err = g.NextIDs(1)
					if err == nil {
						id = b[0]
					}
				} else {
					id, err = g.NextID()
				}
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = append(got[i], id)
			}
		}(i)
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ids := range got {
		strictlyIncreasing(t, ids)
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d IDs", len(seen))
	}

	// Close while goroutines issue: each sees IDs, then only "closed".
	var closedSeen sync.WaitGroup
	for i := 0; i < 4; i++ {
		closedSeen.Add(1)
		go func() {
			defer closedSeen.Done()
			for {
				if _, err := g.NextID(); err != nil {
					if c := code(t, err); c != "closed" {
						t.Errorf("after close: %s", c)
					}
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	g.Close()
	closedSeen.Wait()
}

func TestFromConfigFileRegistry(t *testing.T) {
	path := config(t, "[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\n")
	g, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := 0; i < 1000; i++ {
		id, err := g.NextID()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	more, err := g.NextIDs(5000)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, more...)
	strictlyIncreasing(t, ids)
	if s, _ := g.Status(); s.Lease != "held" || s.Registry != "file" {
		t.Fatalf("status %+v", s)
	}
	// The data directory is this generator's alone while it is open.
	_, err = idmint.GeneratorFromConfig(path)
	if c := code(t, err); c != "registry_config" {
		t.Fatal(c)
	}
	g.Close()
	again, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	next, err := again.NextID()
	if err != nil || next <= ids[len(ids)-1] {
		t.Fatalf("%d after %d (the mark persisted ahead): %v", next, ids[len(ids)-1], err)
	}
}

func TestLeasedOnPostgres(t *testing.T) {
	url := postgres(t)
	path := config(t, fmt.Sprintf("[snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = %q\ncluster = %q\n",
		url, unique("go")))
	twoProcesses(t, path)
	g, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if s, _ := g.Status(); s.Registry != "sql" || s.Lease != "held" {
		t.Fatalf("status %+v", s)
	}
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
}

func TestLeasedOnPostgresUidGeneratorTable(t *testing.T) {
	url := postgres(t)
	table := unique("worker_node")
	psql(t, "CREATE TABLE "+table+" (ID BIGSERIAL NOT NULL, HOST_NAME VARCHAR(64) NOT NULL, "+
		"PORT VARCHAR(64) NOT NULL, TYPE INT NOT NULL, LAUNCH_DATE DATE NOT NULL, "+
		"MODIFIED TIMESTAMP NOT NULL, CREATED TIMESTAMP NOT NULL, PRIMARY KEY(ID))")
	t.Cleanup(func() { psql(t, "DROP TABLE "+table) })
	path := config(t, fmt.Sprintf("[snowflake]\nlayout = \"baidu,epoch=2024-01-01\"\nregistry = \"sql\"\n"+
		"[snowflake.sql]\nurl = %q\nmode = \"uid-generator\"\ntable = %q\n", url, table))
	twoProcesses(t, path)
}

func TestLeasedOnEtcd(t *testing.T) {
	endpoint := etcd(t)
	path := config(t, fmt.Sprintf("[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nendpoints = [%q]\ncluster = %q\n",
		endpoint, unique("go")))
	twoProcesses(t, path)
	g, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if s, _ := g.Status(); s.Registry != "etcd" || s.Lease != "held" {
		t.Fatalf("status %+v", s)
	}
}

// twoProcesses runs this test binary twice as children on one registry
// (TestMain's child mode), both holding their leases at once: distinct
// worker IDs, no ID twice.
func twoProcesses(t *testing.T, path string) {
	t.Helper()
	type proc struct {
		cmd   *exec.Cmd
		stdin interface{ Close() error }
		out   *bufio.Reader
		err   *strings.Builder
	}
	var procs []proc
	for i := 0; i < 2; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := &strings.Builder{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{cmd, stdin, bufio.NewReaderSize(stdout, 1<<20), stderr})
	}
	var workers []int
	seen := map[int64]bool{}
	for _, p := range procs {
		line, err := p.out.ReadString('\n')
		if err != nil {
			_ = p.cmd.Wait()
			t.Fatalf("child: %v\n%s", err, p.err)
		}
		fields := strings.Fields(line)
		w, _ := strconv.Atoi(fields[0])
		workers = append(workers, w)
		for _, f := range fields[1:] {
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
		}
	}
	for _, p := range procs {
		p.stdin.Close()
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("child: %v\n%s", err, p.err)
		}
	}
	if len(seen) != 40000 {
		t.Fatalf("%d IDs", len(seen))
	}
	if workers[0] == workers[1] {
		t.Fatalf("both processes issued with worker %d", workers[0])
	}
}

func TestALostLeaseRefusesAndIssuesNothing(t *testing.T) {
	url, stop := privateRedis(t)
	path := config(t, fmt.Sprintf("[snowflake]\nregistry = \"redis\"\nwindow = \"1s\"\n"+
		"[snowflake.redis]\nurl = %q\nlease_ttl = \"2s\"\n", url))
	g, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	stop()
	stopped := time.Now()
	var refused *idmint.Error
	for {
		_, err := g.NextID()
		if err != nil {
			refused = asError(t, err)
			break
		}
		if time.Since(stopped) > 5*time.Second {
			t.Fatal("still issuing 5 s after the registry stopped (lease 2 s)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refused.Code != "mark_reached" || !refused.Retryable || refused.RetryAfter != time.Second {
		t.Fatalf("%+v", refused)
	}
	time.Sleep(2 * time.Second) // past the lease's end: nothing, by any call
	var last *idmint.Error
	for i := 0; i < 20; i++ {
		if _, err := g.NextID(); code(t, err) != "mark_reached" {
			t.Fatal(err)
		}
		_, err := g.NextIDs(100)
		last = asError(t, err)
		if last.Code != "mark_reached" {
			t.Fatal(last)
		}
	}
	if !strings.Contains(last.Message, "expired") && !strings.Contains(last.Message, "lost") {
		t.Fatal(last.Message)
	}
	if s, _ := g.Status(); s.Lease != "expired" && s.Lease != "lost" {
		t.Fatalf("status %+v", s)
	}
}

func TestConfigsAnEmbeddedProcessCannotUseAreRefused(t *testing.T) {
	forever := config(t, "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\nmode = \"forever\"\n")
	_, err := idmint.GeneratorFromConfig(forever)
	if e := asError(t, err); e.Code != "invalid_config" || !strings.Contains(e.Message, "ephemeral") {
		t.Fatalf("%+v", e)
	}
	typo := config(t, "[snowflake]\nregistery = \"file\"\n")
	_, err = idmint.GeneratorFromConfig(typo)
	if e := asError(t, err); e.Code != "invalid_config" || !strings.Contains(e.Message, "registery") {
		t.Fatalf("%+v", e)
	}
	expired := config(t, "[snowflake]\nlayout = \"baidu\"\n")
	_, err = idmint.GeneratorFromConfig(expired)
	if e := asError(t, err); e.Code != "invalid_config" || !strings.Contains(e.Message, "ran out") {
		t.Fatalf("%+v", e)
	}
	_, err = idmint.GeneratorFromConfig("/nonexistent/idmint.toml")
	if c := code(t, err); c != "invalid_config" {
		t.Fatal(c)
	}
}

func strictlyIncreasing(t *testing.T, ids []int64) {
	t.Helper()
	if !sort.SliceIsSorted(ids, func(i, j int) bool { return ids[i] < ids[j] }) {
		t.Fatal("IDs not in order")
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("ID %d twice", ids[i])
		}
	}
}
