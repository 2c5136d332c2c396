package idmint_test

// What the tests share: config files, the real services, the `idmint`
// binary to compare with, a private Redis a test may stop, and the child
// mode of this test binary (TestMain) for the two-process tests.
//
// Services, as the Rust and Python tests use them: PostgreSQL on
// 127.0.0.1:5432, MariaDB on 127.0.0.1:3306, Redis on 127.0.0.1:6379, etcd at
// IDMINT_TEST_ETCD_ENDPOINT. A missing service fails the test under CI=true
// and skips it elsewhere, loudly.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	idmint "github.com/idmint/idmint/bindings/go"
)

const (
	postgresURL = "postgres://postgres@127.0.0.1:5432/test"
	mysqlURL    = "mysql://root@127.0.0.1:3306/test"
	redisURL    = "redis://127.0.0.1:6379/"
	// childEnv makes this test binary a child that claims from the config it
	// names (twoProcesses).
	childEnv = "IDMINT_GO_TEST_CHILD_CONFIG"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(child(path))
	}
	os.Exit(m.Run())
}

// child claims a worker from the config at path, prints the worker ID and
// 20,000 IDs on one line, holds the lease until its stdin closes (the parent
// has read every process's line), then closes.
func child(path string) int {
	g, err := idmint.GeneratorFromConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ids, err := g.NextIDs(20000)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	status, err := g.Status()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprint(w, status.Worker)
	for _, id := range ids {
		fmt.Fprint(w, " ", id)
	}
	fmt.Fprintln(w)
	w.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin)
	g.Close()
	return 0
}

// repo is the repository's root.
func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// require fails the test under CI=true when a service is missing, else skips.
func require(t *testing.T, name string, reachable bool) {
	t.Helper()
	if reachable {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not reachable and CI=true: start it before the tests", name)
	}
	t.Skipf("SKIPPED: %s is not reachable", name)
}

func listens(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func postgres(t *testing.T) string {
	require(t, "PostgreSQL on 127.0.0.1:5432", listens(5432))
	return postgresURL
}

func mariadb(t *testing.T) string {
	require(t, "MariaDB on 127.0.0.1:3306", listens(3306))
	return mysqlURL
}

func redis(t *testing.T) string {
	require(t, "Redis on 127.0.0.1:6379", listens(6379))
	return redisURL
}

func etcd(t *testing.T) string {
	endpoint := os.Getenv("IDMINT_TEST_ETCD_ENDPOINT")
	require(t, "etcd (IDMINT_TEST_ETCD_ENDPOINT)", endpoint != "")
	return endpoint
}

// unique is a name no other test run uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000_000)
}

// config writes a config file in a temporary directory ([server] data_dir
// there, then body) and returns its path.
func config(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "idmint.toml")
	text := fmt.Sprintf("[server]\ndata_dir = %q\n\n%s\n", filepath.Join(dir, "data"), body)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// mysql runs SQL on MariaDB's test database with the mysql client.
func mysql(t *testing.T, sql string) {
	t.Helper()
	run(t, "mysql", "-h", "127.0.0.1", "-P", "3306", "-u", "root", "test", "-e", sql)
}

// psql runs SQL on PostgreSQL's test database with psql.
func psql(t *testing.T, sql string) {
	t.Helper()
	run(t, "psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-v", "ON_ERROR_STOP=1", "-c", sql)
}

// privateRedis starts a throwaway redis-server (scripts/redis) the test may
// stop; it is stopped at the end. Returns its URL and the stop function.
func privateRedis(t *testing.T) (string, func()) {
	t.Helper()
	script := filepath.Join(repo(), "scripts", "redis")
	dir := t.TempDir()
	require(t, "redis-server (scripts/redis check)", exec.Command(script, "check", dir).Run() == nil)
	d := filepath.Join(dir, "redis")
	url := strings.TrimSpace(run(t, script, "start", d))
	stop := func() { _ = exec.Command(script, "stop", d).Run() }
	t.Cleanup(stop)
	return url, func() { run(t, script, "stop", d) }
}

// idmintBin is the `idmint` binary to compare with: IDMINT_BIN, else the
// workspace's debug build (scripts/test builds it), else one on PATH.
func idmintBin(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("IDMINT_BIN"), filepath.Join(repo(), "target", "debug", "idmint")}
	if p, err := exec.LookPath("idmint"); err == nil {
		candidates = append(candidates, p)
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); c != "" && err == nil && !st.IsDir() {
			return c
		}
	}
	require(t, "the idmint binary (cargo build -p idmint)", false)
	return ""
}

// code is the idmint error code of err, failing the test when err is not an
// *idmint.Error.
func code(t *testing.T, err error) string {
	t.Helper()
	e := asError(t, err)
	return e.Code
}

// asError is err as an *idmint.Error (through errors.As, as a caller matches
// it), failing the test when it is not one.
func asError(t *testing.T, err error) *idmint.Error {
	t.Helper()
	var e *idmint.Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *idmint.Error, got %T: %v", err, err)
	}
	return e
}
