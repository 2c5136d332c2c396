package idmint_test

// The Go binding's in-process figures (BENCHMARKS.md, "Go binding"), each
// beside a baseline measured in the same run; scripts/bench-go runs them
// against the release build and prints medians:
//
//   - BenchmarkCap: NextID of Generator(twitter, wait policy) on one
//     goroutine, against the layout's cap of 4,096,000 IDs/s; beside it a
//     plain mutex Snowflake written the way bwmarrin/snowflake writes its
//     Node.Generate. Every ID of every run is kept and duplicates counted,
//     the peer's too.
//   - BenchmarkOneCall: NextID of a generator that may borrow the next ticks
//     (SequenceExhausted "borrow:1s", so the cap doesn't hold it back)
//     against a bare atomic.AddInt64, per call; and a cgo call that does
//     nothing (PublicIDs.Bits), what crossing into C alone costs.
//   - BenchmarkBatch100k: NextIDs(100_000) into a []int64, against making
//     and filling a []int64 of 100,000 in a loop.

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idmint "github.com/idmint/idmint/bindings/go"
)

// duplicates counts the IDs that are in ids more than once (sorting it).
func duplicates(ids []int64) int {
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	dups := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			dups++
		}
	}
	return dups
}

// atTheCap runs next b.N times on one goroutine, keeping every ID, and
// reports IDs/s and the duplicates among them.
func atTheCap(b *testing.B, next func() (int64, error)) {
	ids := make([]int64, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range ids {
		id, err := next()
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "ids/s")
	b.ReportMetric(float64(duplicates(ids)), "dups")
}

func BenchmarkCap(b *testing.B) {
	b.Run("idmint", func(b *testing.B) {
		g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		atTheCap(b, g.NextID)
	})
	b.Run("mutex-snowflake", func(b *testing.B) {
		n := newMutexNode(1)
		atTheCap(b, func() (int64, error) { return n.Generate(), nil })
	})
}

func BenchmarkOneCall(b *testing.B) {
	b.Run("idmint-borrowing", func(b *testing.B) {
		var g *idmint.Generator
		for i := 0; i < b.N; i++ {
			// A borrowing generator runs ahead of the clock by up to 1 s
			// (4,096,000 IDs): a fresh one every 1,000,000 calls keeps every
			// call borrowing, never waiting for the clock.
			if i%1_000_000 == 0 {
				b.StopTimer()
				if g != nil {
					g.Close()
				}
				g = borrowing(b)
				b.StartTimer()
			}
			if _, err := g.NextID(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if g != nil {
			g.Close()
		}
	})
	b.Run("cgo-call", func(b *testing.B) {
		// The cost of crossing into C and back alone: PublicIDs.Bits is one
		// cgo call that reads a byte of its handle.
		p, err := idmint.NewPublicIDs(idmint.PublicIDOptions{Key: key})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if p.Bits() != 63 {
				b.Fatal("bits")
			}
		}
	})
	b.Run("atomic-add", func(b *testing.B) {
		var counter int64
		for i := 0; i < b.N; i++ {
			atomic.AddInt64(&counter, 1)
		}
	})
}

func BenchmarkBatch100k(b *testing.B) {
	const n = 100_000
	b.Run("idmint", func(b *testing.B) {
		dups := 0
		for i := 0; i < b.N; i++ {
			// A fresh borrowing generator for each batch (as for one call).
			b.StopTimer()
			g := borrowing(b)
			b.StartTimer()
			ids, err := g.NextIDs(n)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			g.Close()
			dups += duplicates(ids)
			b.StartTimer()
		}
		b.ReportMetric(float64(dups), "dups")
	})
	b.Run("make-and-fill", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			ids := make([]int64, n)
			for j := range ids {
				ids[j] = int64(j)
			}
			sink = ids
		}
	})
}

// borrowing is a generator that may borrow the next ticks (up to 1 s ahead)
// when a tick's sequence runs out, so the layout's cap doesn't hold a call
// back; the caller closes it. Each takes the next of the Twitter layout's
// nodes in datacenters 1 to 31 in turn (datacenter 0 has the cap
// benchmark's): idmint-embed refuses a second open generator on a node
// (worker_taken), and one that would start behind the time its node's last
// generator borrowed up to (clock_behind); a node comes round again only
// after 991 others, well past that second.
func borrowing(b *testing.B) *idmint.Generator {
	node := atomic.AddUint32(&borrowed, 1) % (31 * 32)
	g, err := idmint.NewGenerator(idmint.Options{
		Layout:            "twitter",
		Datacenter:        1 + node/32,
		Worker:            node % 32,
		SequenceExhausted: "borrow:1s",
	})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// borrowed counts the generators borrowing has made.
var borrowed uint32

// sink keeps the baseline's slices alive, so the compiler can't drop them.
var sink []int64

// mutexNode is the peer: a Snowflake behind a sync.Mutex, shaped as
// bwmarrin/snowflake's Node (41 bits of milliseconds since the Twitter
// epoch on Go's monotonic clock, 10 node bits, 12 step bits; when a
// millisecond's steps run out it spins, holding the lock, until the next
// millisecond).
type mutexNode struct {
	mu    sync.Mutex
	epoch time.Time
	time  int64
	node  int64
	step  int64
}

const (
	peerNodeBits = 10
	peerStepBits = 12
	peerStepMask = -1 ^ (-1 << peerStepBits)
	peerTimeShft = peerNodeBits + peerStepBits
	peerNodeShft = peerStepBits
	twitterEpoch = 1288834974657
)

func newMutexNode(node int64) *mutexNode {
	now := time.Now()
	// As bwmarrin/snowflake: the epoch as a time with a monotonic reading.
	epoch := now.Add(time.Unix(twitterEpoch/1000, (twitterEpoch%1000)*1_000_000).Sub(now))
	return &mutexNode{epoch: epoch, node: node}
}

func (n *mutexNode) Generate() int64 {
	n.mu.Lock()
	now := time.Since(n.epoch).Milliseconds()
	if now == n.time {
		n.step = (n.step + 1) & peerStepMask
		if n.step == 0 {
			for now <= n.time {
				now = time.Since(n.epoch).Milliseconds()
			}
		}
	} else {
		n.step = 0
	}
	n.time = now
	r := now<<peerTimeShft | n.node<<peerNodeShft | n.step
	n.mu.Unlock()
	return r
}
