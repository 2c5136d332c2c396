//go:build !idmint_debug

package idmint

// The static library `cargo build --release -p idmint-ffi` makes, in the
// workspace's target/ (the README's build step).

// #cgo linux LDFLAGS: ${SRCDIR}/../../target/release/libidmint_ffi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
import "C"
