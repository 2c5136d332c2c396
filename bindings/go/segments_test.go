package idmint_test

// Segment keys on Leaf's own leaf_alloc table in MariaDB, on Redis, and on
// the embedded default store.

import (
	"fmt"
	"testing"

	idmint "github.com/idmint/idmint/bindings/go"
)

func TestLeafAllocOnMariaDB(t *testing.T) {
	url := mariadb(t)
	table := unique("leaf_alloc")
	// Leaf's DDL (scripts/leaf_alloc.sql) and a row Leaf has issued from.
	mysql(t, fmt.Sprintf("CREATE TABLE `%s` ("+
		"`biz_tag` varchar(128) NOT NULL DEFAULT '', "+
		"`max_id` bigint(20) NOT NULL DEFAULT '1', "+
		"`step` int(11) NOT NULL, "+
		"`description` varchar(256) DEFAULT NULL, "+
		"`update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, "+
		"PRIMARY KEY (`biz_tag`)) ENGINE=InnoDB; "+
		"INSERT INTO `%s` (biz_tag, max_id, step, description) VALUES ('leaf-segment-test', 10001, 2000, 'from Leaf');",
		table, table))
	t.Cleanup(func() { mysql(t, fmt.Sprintf("DROP TABLE `%s`", table)) })
	path := config(t, fmt.Sprintf("[segment]\nurl = %q\nschema = \"leaf\"\ntable = %q\n", url, table))
	a, err := idmint.SegmentsFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := idmint.SegmentsFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seen := map[int64]bool{}
	last := int64(0)
	for i := 0; i < 3000; i++ {
		id, err := a.NextID("leaf-segment-test")
		if err != nil {
			t.Fatal(err)
		}
		if id <= last || id < 10001 { // above everything Leaf issued
			t.Fatalf("%d after %d", id, last)
		}
		last = id
		seen[id] = true
		other, err := b.NextID("leaf-segment-test")
		if err != nil {
			t.Fatal(err)
		}
		seen[other] = true
	}
	batch, err := a.NextIDs("leaf-segment-test", 5000)
	if err != nil {
		t.Fatal(err)
	}
	if batch[0] <= last {
		t.Fatalf("batch starts at %d after %d", batch[0], last)
	}
	strictlyIncreasing(t, batch)
	for _, id := range batch {
		seen[id] = true
	}
	if len(seen) != 3000*2+5000 {
		t.Fatalf("%d distinct IDs", len(seen))
	}
	_, err = a.NextID("no-such-key")
	if c := code(t, err); c != "key_not_found" {
		t.Fatal(c)
	}
	_, err = a.NextID("bad key!")
	if c := code(t, err); c != "invalid_key" {
		t.Fatal(c)
	}
	a.Close()
	a.Close()
	_, err = a.NextID("leaf-segment-test")
	if c := code(t, err); c != "closed" {
		t.Fatal(c)
	}
}

func TestStoreDownIsRefusedWithARetryHint(t *testing.T) {
	// Nothing listens on port 1: the store can't be opened.
	path := config(t, "[segment]\nurl = \"mysql://root@127.0.0.1:1/test\"\n")
	_, err := idmint.SegmentsFromConfig(path)
	e := asError(t, err)
	if (e.Code != "store_error" && e.Code != "store_timeout") || !e.Retryable || e.RetryAfter <= 0 {
		t.Fatalf("%+v", e)
	}
}

func TestDeclaredKeysOnTheDefaultStore(t *testing.T) {
	path := config(t, "[segment.keys.order]\nstep = 100\nstart = 1000\n")
	s, err := idmint.SegmentsFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for want := int64(1000); want < 1250; want++ {
		id, err := s.NextID("order")
		if err != nil || id != want {
			t.Fatalf("%d, want %d: %v", id, want, err)
		}
	}
	_, err = s.NextIDs("order", 0)
	if c := code(t, err); c != "invalid_count" {
		t.Fatal(c)
	}
}

func TestRedisStore(t *testing.T) {
	url := redis(t)
	path := config(t, fmt.Sprintf("[segment]\nurl = %q\nkey_prefix = %q\n[segment.keys.invoice]\nstep = 50\nstart = 7\n",
		url, unique("go")+":"))
	s, err := idmint.SegmentsFromConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []int64
	for i := 0; i < 120; i++ {
		id, err := s.NextID("invoice")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	more, err := s.NextIDs("invoice", 500)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, more...)
	for i, id := range ids {
		if id != int64(7+i) {
			t.Fatalf("ids[%d] = %d", i, id)
		}
	}
}
