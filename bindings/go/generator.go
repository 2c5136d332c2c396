package idmint

// #include "idmint.h"
import "C"

import (
	"runtime"
)

// Options make a generator with a fixed worker ID (NewGenerator). The
// policies left "" take the core's defaults.
type Options struct {
	// Layout is the layout's text form ("twitter", "baidu,epoch=2024-01-01",
	// ...): required.
	Layout string
	// Worker is the worker part of the node field.
	Worker uint32
	// Datacenter is the datacenter part of the node field.
	Datacenter uint32
	// ClockBehind is what to do when the clock is behind the last ID:
	// "fail", "wait:5ms" (the default), "borrow:1s", "rollback-bits",
	// "history:64".
	ClockBehind string
	// SequenceExhausted is what to do when a tick's sequence runs out:
	// "wait" (the default: wait for the next tick), "borrow:1s".
	SequenceExhausted string
	// SequenceStart is where each tick's sequence starts: "zero" (the
	// default), "random:100".
	SequenceStart string
	// WallClock uses the raw wall clock instead of the default (the wall
	// clock read once, advanced by the monotonic clock).
	WallClock bool
}

// Generator makes snowflake IDs in this process.
//
//   - Fixed (NewGenerator): a worker ID the caller keeps unique across
//     processes; no registry, no I/O.
//   - Leased (GeneratorFromConfig): the [snowflake] section of an `idmint
//     serve` config; the worker ID is claimed from its registry, the
//     high-water mark is persisted ahead of the IDs and the lease renewed by
//     a keeper on the generator's own thread, and the generator refuses
//     (mark_reached, no ID issued) once the lease or the store is lost.
//
// Safe for many goroutines at once; IDs from one generator strictly
// increase. Close releases the lease; it is idempotent, and every later call
// fails with code "closed". Call it (defer g.Close()): a process that exits
// without it leaves its lease to run out, as a crashed one does.
type Generator struct {
	h      *C.IdmintGenerator
	layout *Layout
}

// NewGenerator makes a generator with a fixed worker ID.
//
// Errors: invalid_layout_text, invalid_text (a policy), node_out_of_range,
// invalid_config.
func NewGenerator(o Options) (*Generator, error) {
	layout, free1 := cString(o.Layout, false)
	defer free1()
	behind, free2 := cString(o.ClockBehind, true)
	defer free2()
	exhausted, free3 := cString(o.SequenceExhausted, true)
	defer free3()
	start, free4 := cString(o.SequenceStart, true)
	defer free4()
	options := C.IdmintGeneratorOptions{
		layout:             layout,
		worker:             C.uint32_t(o.Worker),
		datacenter:         C.uint32_t(o.Datacenter),
		clock_behind:       behind,
		sequence_exhausted: exhausted,
		sequence_start:     start,
		wall_clock:         C.bool(o.WallClock),
	}
	var h *C.IdmintGenerator
	if err := takeError(C.idmint_generator_new(&options, &h)); err != nil {
		return nil, err
	}
	return wrapGenerator(h)
}

// GeneratorFromConfig makes a generator from the [snowflake] section of the
// `idmint serve` config file at path (then the IDMINT_… environment
// variables over it): it claims a worker ID from the registry and returns
// once IDs can be issued.
//
// Errors: invalid_config, and the registry's codes for a failed claim
// (workers_exhausted, registry_timeout, registry_backend, ...).
func GeneratorFromConfig(path string) (*Generator, error) {
	c, free := cString(path, false)
	defer free()
	var h *C.IdmintGenerator
	if err := takeError(C.idmint_generator_from_config(c, &h)); err != nil {
		return nil, err
	}
	return wrapGenerator(h)
}

// wrapGenerator owns h: closed and freed when the Generator is garbage (a
// safety net: Close is what releases a lease in time).
func wrapGenerator(h *C.IdmintGenerator) (*Generator, error) {
	g := &Generator{h: h}
	runtime.SetFinalizer(g, func(g *Generator) { C.idmint_generator_free(g.h) })
	var l *C.IdmintLayout
	if err := takeError(C.idmint_generator_layout(h, &l)); err != nil {
		g.Close()
		return nil, err
	}
	layout, err := wrapLayout(l)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.layout = layout
	return g, nil
}

// NextID returns the next ID.
//
// Errors: closed; clock_behind, layout_exhausted, clock_before_epoch;
// mark_reached when the high-water mark can't be persisted in time or the
// lease is gone (no ID is issued then).
func (g *Generator) NextID() (int64, error) {
	// By value: no Go pointer crosses, so nothing is moved to the heap.
	r := C.idmint_generator_next(g.h)
	runtime.KeepAlive(g)
	if r.error != nil {
		return 0, takeError(r.error)
	}
	return int64(r.id), nil
}

// NextIDs returns n IDs in increasing order, in one call into the core. Up
// to a tick's worth (4096 for twitter) come at once; more wait for the ticks
// they need, at the layout's cap.
//
// Errors: invalid_count for n below 1 or above MaxBatch; else as NextID.
func (g *Generator) NextIDs(n int) ([]int64, error) {
	// The count is checked by idmint (the one check every binding uses)
	// before memory is set aside for it.
	if e := C.idmint_generator_check_count(C.int64_t(n)); e != nil {
		return nil, takeError(e)
	}
	out, p := ids(n)
	e := C.idmint_generator_next_ids(g.h, C.int64_t(n), p)
	runtime.KeepAlive(g)
	if e != nil {
		return nil, takeError(e)
	}
	return out, nil
}

// Status is the worker ID a generator issues with and its lease's state.
type Status struct {
	// Registry is "fixed" for a fixed worker, else the registry's name
	// ("etcd", "sql", "redis", ...).
	Registry string
	// Worker is the worker ID issued with (the whole node field for a
	// claimed one).
	Worker uint32
	// Lease is "held", "renewing", "expired", "lost" or "stopped".
	Lease string
	// NotReady says why the generator would refuse now; "" when it would
	// not.
	NotReady string
}

// Status returns the worker ID and the lease's state.
//
// Errors: closed.
func (g *Generator) Status() (Status, error) {
	var s C.IdmintGeneratorStatus
	e := C.idmint_generator_status(g.h, &s)
	runtime.KeepAlive(g)
	if err := takeError(e); err != nil {
		return Status{}, err
	}
	defer C.idmint_generator_status_free(&s)
	out := Status{
		Registry: C.GoString(s.registry),
		Worker:   uint32(s.worker),
		Lease:    C.GoString(s.lease),
	}
	if s.not_ready != nil {
		out.NotReady = C.GoString(s.not_ready)
	}
	return out, nil
}

// Layout returns the layout IDs are made with.
func (g *Generator) Layout() *Layout { return g.layout }

// Close stops issuing, releases the lease (waiting up to a few seconds for
// the registry) and stops the generator's thread. Idempotent, and safe while
// other goroutines call the generator: every later call fails with "closed".
func (g *Generator) Close() {
	C.idmint_generator_close(g.h)
	runtime.KeepAlive(g)
}
