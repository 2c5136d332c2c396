package idmint

// #include "idmint.h"
import "C"

import (
	"runtime"
)

// PublicIDOptions are the settings of the server's [obfuscation] section.
type PublicIDOptions struct {
	// Key is the key ring: "HEX" or "KEY_ID:HEX" entries, space-separated.
	Key string
	// Bits is the width of public IDs, 32 to 64; 0 means the default
	// (idmint's, through the C ABI: 63, as the config's).
	Bits int
	// KeyIDBits is the number of key-ID bits, 0 to 8.
	KeyIDBits int
	// ActiveKey is the key ID new public IDs are made with; nil means the
	// last key listed.
	ActiveKey *int
	// Format is the text form: "dec", "base32" or "sqids"; "" means the
	// default (idmint's: "dec").
	Format string
}

// PublicIDs obfuscates IDs into public IDs (a keyed, reversible permutation)
// and reveals them, and writes and reads their text form. A public ID made
// here is revealed by a server with the same settings, and the other way
// round. Pure and safe for many goroutines; public IDs are uint64 (64-bit
// ones use the top bit).
type PublicIDs struct {
	h *C.IdmintPublicIds
}

// NewPublicIDs makes public IDs from explicit settings.
//
// Errors: invalid_config naming the setting (never quoting a key).
func NewPublicIDs(o PublicIDOptions) (*PublicIDs, error) {
	// idmint's defaults, then what o sets; the ranges are checked there.
	options := C.idmint_public_ids_options_default()
	key, free1 := cString(o.Key, false)
	defer free1()
	options.key = key
	if o.Bits != 0 {
		options.bits = C.int64_t(o.Bits)
	}
	options.key_id_bits = C.int64_t(o.KeyIDBits)
	if o.Format != "" {
		format, free2 := cString(o.Format, false)
		defer free2()
		options.format = format
	}
	if o.ActiveKey != nil {
		options.has_active_key = true
		options.active_key = C.int64_t(*o.ActiveKey)
	}
	var h *C.IdmintPublicIds
	if err := takeError(C.idmint_public_ids_new(&options, &h)); err != nil {
		return nil, err
	}
	return wrapPublicIDs(h), nil
}

// PublicIDsFromConfig makes public IDs from the [obfuscation] section of the
// config file at path (and IDMINT_OBFUSCATION_KEY, as `idmint serve` reads
// it).
//
// Errors: invalid_config, also for a config with no key.
func PublicIDsFromConfig(path string) (*PublicIDs, error) {
	c, free := cString(path, false)
	defer free()
	var h *C.IdmintPublicIds
	if err := takeError(C.idmint_public_ids_from_config(c, &h)); err != nil {
		return nil, err
	}
	return wrapPublicIDs(h), nil
}

func wrapPublicIDs(h *C.IdmintPublicIds) *PublicIDs {
	p := &PublicIDs{h: h}
	runtime.SetFinalizer(p, func(p *PublicIDs) { C.idmint_public_ids_free(p.h) })
	return p
}

// Obfuscate returns the public ID of id.
//
// Errors: invalid_id for a negative ID or one wider than the public IDs.
func (p *PublicIDs) Obfuscate(id int64) (uint64, error) {
	var out C.uint64_t
	e := C.idmint_public_ids_obfuscate(p.h, C.uint64_t(uint64(id)), &out)
	runtime.KeepAlive(p)
	if err := takeError(e); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// Reveal returns the ID behind public.
//
// Errors: invalid_public_id outside the width, unknown_key_id for a key ID
// with no key here.
func (p *PublicIDs) Reveal(public uint64) (int64, error) {
	var out C.uint64_t
	e := C.idmint_public_ids_reveal(p.h, C.uint64_t(public), &out)
	runtime.KeepAlive(p)
	if err := takeError(e); err != nil {
		return 0, err
	}
	return int64(out), nil
}

// Encode writes public in the text form.
//
// Errors: encode_failed when Sqids can't write it.
func (p *PublicIDs) Encode(public uint64) (string, error) {
	var out *C.char
	e := C.idmint_public_ids_encode(p.h, C.uint64_t(public), &out)
	runtime.KeepAlive(p)
	if err := takeError(e); err != nil {
		return "", err
	}
	defer C.idmint_string_free(out)
	return C.GoString(out), nil
}

// Decode reads a public ID's text form.
//
// Errors: invalid_public_id naming the text.
func (p *PublicIDs) Decode(text string) (uint64, error) {
	c, free := cString(text, false)
	defer free()
	var out C.uint64_t
	e := C.idmint_public_ids_decode(p.h, c, &out)
	runtime.KeepAlive(p)
	if err := takeError(e); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// ObfuscateText returns the public ID of id, as text.
func (p *PublicIDs) ObfuscateText(id int64) (string, error) {
	public, err := p.Obfuscate(id)
	if err != nil {
		return "", err
	}
	return p.Encode(public)
}

// RevealText returns the ID behind a public ID's text.
func (p *PublicIDs) RevealText(text string) (int64, error) {
	public, err := p.Decode(text)
	if err != nil {
		return 0, err
	}
	return p.Reveal(public)
}

// Format is the text form's name: "dec", "base32" or "sqids".
func (p *PublicIDs) Format() string {
	s := C.GoString(C.idmint_public_ids_format(p.h))
	runtime.KeepAlive(p)
	return s
}

// Bits is the width of public IDs in bits.
func (p *PublicIDs) Bits() int {
	b := int(C.idmint_public_ids_bits(p.h))
	runtime.KeepAlive(p)
	return b
}
