package idmint

// #include "idmint.h"
import "C"

import (
	"runtime"
	"time"
)

// Layout says how an ID's 63 (or fewer) bits split into time, node and
// sequence. Immutable; safe for many goroutines.
type Layout struct {
	h    *C.IdmintLayout
	info C.IdmintLayoutInfo
	// The text form and preset, read once (the info's strings are the
	// handle's).
	text, preset string
}

// ParseLayout reads the text form the CLI and config take: a preset
// (twitter, leaf, baidu, sonyflake, discord, instagram, js53, tso), a preset
// with fields changed ("twitter,epoch=2024-01-01"), or every field
// ("time=41,unit=1ms,epoch=...,worker=10,sequence=12").
//
// Errors: invalid_layout_text or invalid_layout, naming the part at fault.
func ParseLayout(text string) (*Layout, error) {
	c, free := cString(text, false)
	defer free()
	var h *C.IdmintLayout
	if err := takeError(C.idmint_layout_parse(c, &h)); err != nil {
		return nil, err
	}
	return wrapLayout(h)
}

// wrapLayout owns h: freed when the Layout is garbage.
func wrapLayout(h *C.IdmintLayout) (*Layout, error) {
	l := &Layout{h: h}
	runtime.SetFinalizer(l, func(l *Layout) { C.idmint_layout_free(l.h) })
	if err := takeError(C.idmint_layout_info(h, &l.info)); err != nil {
		return nil, err
	}
	l.text = C.GoString(l.info.text)
	if l.info.preset != nil {
		l.preset = C.GoString(l.info.preset)
	}
	return l, nil
}

// Decoded is an ID taken apart by Layout.Decode.
type Decoded struct {
	ID int64
	// Time is the start of the tick the ID was made in, in UTC.
	Time time.Time
	// Tick counts time units since the layout's epoch.
	Tick       uint64
	Datacenter uint32
	Worker     uint32
	// Rollback is the rollback counter (0 when the layout has none).
	Rollback uint32
	Sequence uint32
}

// IDParts are what Layout.Compose puts an ID together from.
type IDParts struct {
	// Tick counts time units since the layout's epoch (Layout.TickAt).
	Tick       uint64
	Datacenter uint32
	Worker     uint32
	Rollback   uint32
	Sequence   uint32
}

// Decode takes id apart.
//
// Errors: invalid_id when id is negative or has bits set above the
// layout's fields.
func (l *Layout) Decode(id int64) (Decoded, error) {
	var d C.IdmintDecoded
	e := C.idmint_layout_decode(l.h, C.uint64_t(uint64(id)), &d)
	runtime.KeepAlive(l)
	if err := takeError(e); err != nil {
		return Decoded{}, err
	}
	return Decoded{
		ID:         int64(d.id),
		Time:       goTime(d.time),
		Tick:       uint64(d.tick),
		Datacenter: uint32(d.datacenter),
		Worker:     uint32(d.worker),
		Rollback:   uint32(d.rollback),
		Sequence:   uint32(d.sequence),
	}, nil
}

// Compose puts an ID together from its parts.
//
// Errors: node_out_of_range when a part does not fit its field,
// layout_exhausted when the tick is past the time field.
func (l *Layout) Compose(p IDParts) (int64, error) {
	parts := C.IdmintIdParts{
		tick:       C.uint64_t(p.Tick),
		datacenter: C.uint32_t(p.Datacenter),
		worker:     C.uint32_t(p.Worker),
		rollback:   C.uint32_t(p.Rollback),
		sequence:   C.uint32_t(p.Sequence),
	}
	var id C.uint64_t
	e := C.idmint_layout_compose(l.h, &parts, &id)
	runtime.KeepAlive(l)
	if err := takeError(e); err != nil {
		return 0, err
	}
	return int64(id), nil
}

// TickAt is the tick t falls in, for Compose.
//
// Errors: clock_before_epoch before the epoch, layout_exhausted at or after
// RunsOutAt.
func (l *Layout) TickAt(t time.Time) (uint64, error) {
	var tick C.uint64_t
	e := C.idmint_layout_tick_at(l.h, cTime(t), &tick)
	runtime.KeepAlive(l)
	if err := takeError(e); err != nil {
		return 0, err
	}
	return uint64(tick), nil
}

// RunsOutAt is the first instant the layout can't hold (no ID can be made
// from then on); false when that is past the year 9999.
func (l *Layout) RunsOutAt() (time.Time, bool) {
	if !bool(l.info.runs_out) {
		return time.Time{}, false
	}
	return goTime(l.info.runs_out_at), true
}

// String is the full text form, which ParseLayout reads back.
func (l *Layout) String() string { return l.text }

// Preset is the preset's name ("twitter", "baidu", ...), or "" for a custom
// layout.
func (l *Layout) Preset() string { return l.preset }

// Unit is how long a tick lasts (1 ms for twitter, 1 s for baidu).
func (l *Layout) Unit() time.Duration { return time.Duration(l.info.unit_nanos) }

// IDsPerSecondPerWorker is the layout's cap: IDs one worker can make per
// second.
func (l *Layout) IDsPerSecondPerWorker() float64 { return float64(l.info.ids_per_second_per_worker) }

// Workers is how many worker IDs the node field holds.
func (l *Layout) Workers() uint64 { return uint64(l.info.workers) }

// Equal tells whether two layouts are the same (their full text forms are).
func (l *Layout) Equal(other *Layout) bool { return other != nil && l.text == other.text }
