// Package idmint makes idmint's distributed unique IDs inside a Go process:
// snowflake IDs with a fixed worker ID or one leased from a registry (etcd,
// PostgreSQL, MySQL, SQLite, Redis, ZooKeeper, a file), segment keys from a
// database or Redis, and public IDs. It is a thin cgo layer over idmint's
// Rust core (the C ABI of bindings/c), linked statically: the same code
// `idmint serve` runs, so a config behaves alike in both.
//
//	g, err := idmint.NewGenerator(idmint.Options{Layout: "twitter", Worker: 7})
//	if err != nil { ... }
//	defer g.Close()
//	id, err := g.NextID()
//
// Every failure is an *Error carrying idmint's stable code (Error.Code) and,
// where waiting helps, a retry hint. Generators, segments and layouts are
// safe for use by many goroutines at once.
//
// Build: the package links the static library that
// `cargo build --release -p idmint-ffi` makes in the repository's target/
// directory (with `-tags idmint_debug`, the dev profile's). See README.md.
package idmint

// #cgo CFLAGS: -I${SRCDIR}/../c/include
// #include <stdlib.h>
// #include "idmint.h"
import "C"

import (
	"math"
	"time"
	"unsafe"
)

// MaxBatch is the largest count one Generator.NextIDs call takes, as the
// embedded layer decides it (read from it, never repeated here).
var MaxBatch = int(C.idmint_max_batch())

// DefaultMaxCount is server.max_count when a config doesn't set it: the
// largest count one Segments.NextIDs call takes by default (Segments.MaxCount
// is the config's own).
var DefaultMaxCount = int(C.idmint_default_max_count())

// Error is every failure of this package. Match it with errors.As:
//
//	var e *idmint.Error
//	if errors.As(err, &e) && e.Code == "mark_reached" { time.Sleep(e.RetryAfter) }
type Error struct {
	// Code is idmint's stable, machine-readable code, as the server sends
	// it: "clock_behind", "mark_reached", "key_not_found", "unavailable",
	// "invalid_layout_text", "workers_exhausted", ...; "closed" for a call
	// after Close; "invalid_argument" for input the C boundary refuses;
	// "internal" for a bug.
	Code string
	// Message says what went wrong, naming the offending value. It may
	// change between releases; Code never does.
	Message string
	// Retryable tells whether the same call may succeed after RetryAfter.
	Retryable bool
	// RetryAfter is how long to wait before a retry may succeed (the
	// server's Retry-After); zero when Retryable is false.
	RetryAfter time.Duration
}

// Error returns the code, then the message.
func (e *Error) Error() string {
	return e.Code + ": " + e.Message
}

// takeError turns an error handle into an *Error and frees it; nil for nil.
func takeError(e *C.IdmintError) error {
	if e == nil {
		return nil
	}
	defer C.idmint_error_free(e)
	err := &Error{
		Code:    C.GoString(C.idmint_error_code(e)),
		Message: C.GoString(C.idmint_error_message(e)),
	}
	var nanos C.uint64_t
	if C.idmint_error_retry_after(e, &nanos) {
		err.Retryable = true
		err.RetryAfter = time.Duration(math.MaxInt64)
		if uint64(nanos) < math.MaxInt64 {
			err.RetryAfter = time.Duration(nanos)
		}
	}
	return err
}

// CloseAll closes every generator and segment allocator still open in this
// process, as their Close does: their leases are released now rather than
// when they run out. Go has no hook at a program's exit, so a main that
// would rather not track them all can `defer idmint.CloseAll()`. Safe from
// any goroutine, more than once; later calls on what it closed fail with
// "closed".
func CloseAll() {
	C.idmint_close_all()
}

// cString is s as a C string, freed by the returned function. The empty
// string becomes NULL when optional is true (a setting left at its default).
func cString(s string, optional bool) (*C.char, func()) {
	if optional && s == "" {
		return nil, func() {}
	}
	p := C.CString(s)
	return p, func() { C.free(unsafe.Pointer(p)) }
}

// goTime is an IdmintTime as a time.Time in UTC.
func goTime(t C.IdmintTime) time.Time {
	return time.Unix(int64(t.seconds), int64(t.nanos)).UTC()
}

// cTime is a time.Time as an IdmintTime.
func cTime(t time.Time) C.IdmintTime {
	return C.IdmintTime{seconds: C.int64_t(t.Unix()), nanos: C.uint32_t(t.Nanosecond())}
}

// ids is a []int64 of n, with the pointer C writes n uint64s through (the
// same bits: IDs are below 2^63).
func ids(n int) ([]int64, *C.uint64_t) {
	out := make([]int64, n)
	return out, (*C.uint64_t)(unsafe.Pointer(&out[0]))
}
