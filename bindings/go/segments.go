package idmint

// #include "idmint.h"
import "C"

import (
	"runtime"
)

// Segments hands out segment keys (per-key increasing numbers from ranges
// leased from a store) in this process, from the [segment] section of an
// `idmint serve` config: SQL with idmint's own table, Leaf's leaf_alloc or
// Tinyid's tiny_id_info, or Redis. Ranges are preloaded in the background.
// Safe for many goroutines at once; Close is idempotent.
type Segments struct {
	h *C.IdmintSegments
}

// SegmentsFromConfig opens the config's segment store, creates the keys
// declared in [segment.keys] that it lacks, and starts the preloader.
//
// Errors: invalid_config; the store's codes (store_error, store_timeout,
// ...).
func SegmentsFromConfig(path string) (*Segments, error) {
	return openSegments(path, false)
}

// SegmentsFromConfigWithFloors is SegmentsFromConfig keeping the server's
// floor file in server.data_dir (one process per data directory), so a store
// that forgets what this directory's process issued is refused.
//
// Errors: as SegmentsFromConfig; floor_file_error when another process
// holds the directory, store_reset or key_below_floor.
func SegmentsFromConfigWithFloors(path string) (*Segments, error) {
	return openSegments(path, true)
}

func openSegments(path string, floors bool) (*Segments, error) {
	c, free := cString(path, false)
	defer free()
	var h *C.IdmintSegments
	if err := takeError(C.idmint_segments_from_config(c, C.bool(floors), &h)); err != nil {
		return nil, err
	}
	s := &Segments{h: h}
	runtime.SetFinalizer(s, func(s *Segments) { C.idmint_segments_free(s.h) })
	return s, nil
}

// NextID returns the next ID of key.
//
// Errors: invalid_key, key_not_found, unavailable (store down and buffers
// empty, with a retry hint), key_exhausted, store_went_backwards, closed.
func (s *Segments) NextID(key string) (int64, error) {
	c, free := cString(key, false)
	defer free()
	var id C.uint64_t
	e := C.idmint_segments_next_id(s.h, c, &id)
	runtime.KeepAlive(s)
	if e != nil {
		return 0, takeError(e)
	}
	return int64(id), nil
}

// NextIDs returns n IDs of key in increasing order, spanning ranges as
// needed.
//
// Errors: invalid_count for n below 1 or above the config's
// server.max_count; else as NextID.
func (s *Segments) NextIDs(key string, n int) ([]int64, error) {
	// The count is checked by idmint against the config's limit (the one
	// check every binding uses) before memory is set aside for it.
	e := C.idmint_segments_check_count(s.h, C.int64_t(n))
	runtime.KeepAlive(s)
	if e != nil {
		return nil, takeError(e)
	}
	c, free := cString(key, false)
	defer free()
	out, p := ids(n)
	e = C.idmint_segments_next_ids(s.h, c, C.int64_t(n), p)
	runtime.KeepAlive(s)
	if e != nil {
		return nil, takeError(e)
	}
	return out, nil
}

// MaxCount is the largest count one NextIDs call takes: the config's
// server.max_count (DefaultMaxCount unless the config sets it).
func (s *Segments) MaxCount() int {
	n := int(C.idmint_segments_max_count(s.h))
	runtime.KeepAlive(s)
	return n
}

// Close stops the preloader and closes the store. Idempotent; later calls
// fail with "closed".
func (s *Segments) Close() {
	C.idmint_segments_close(s.h)
	runtime.KeepAlive(s)
}
