//! The one file of layout test vectors every binding's tests read,
//! `bindings/testdata/layout-vectors.tsv`: for each layout (every preset,
//! and a custom one), IDs with the parts and the time the Rust core
//! decodes them into. Each binding checks that its `decode` gives those
//! parts and that `compose` of the parts gives the ID back. This test
//! renders the file from the core and fails when the one in the repository
//! differs; run it with `IDMINT_BLESS=1` to write it.

use std::path::Path;

use idmint_embed::{IdParts, Layout, Timestamp};

/// Every preset, with an epoch moved where the preset has run out already
/// (uid-generator's default ran out on 2024-11-20), and a custom layout.
const LAYOUTS: &[&str] = &[
    "twitter",
    "leaf",
    "baidu,epoch=2024-01-01",
    "sonyflake",
    "discord",
    "instagram",
    "js53",
    "tso",
    "time=39,unit=10ms,epoch=2024-01-01,worker=16,sequence=8",
];

const HEADER: &str = "\
# Layout test vectors, read by every binding's tests. Generated from the Rust core by
# crates/idmint-embed/tests/it/layout_vectors.rs (IDMINT_BLESS=1 writes it); don't edit.
# Tab-separated; decode(id) must give the parts and unix_ms (the start of the tick, in ms
# since 1970), and compose(tick, datacenter, worker, rollback, sequence) must give id.
# layout\tid\tunix_ms\ttick\tdatacenter\tworker\trollback\tsequence
";

/// The vectors of one layout: all parts zero, all at their largest, and a
/// tick of 2025-06-01T12:00Z with small parts.
fn vectors(text: &str) -> Vec<IdParts> {
    let layout = Layout::parse(text).unwrap();
    let core = layout.core();
    let max = |bits: u8| u32::try_from((1u64 << bits) - 1).unwrap();
    let mut out = vec![
        IdParts {
            tick: 0,
            datacenter: 0,
            worker: 0,
            rollback: 0,
            sequence: 0,
        },
        IdParts {
            tick: core.ticks() - 1,
            datacenter: max(core.datacenter_bits()),
            worker: max(core.worker_bits()),
            rollback: max(core.rollback_bits()),
            sequence: max(core.sequence_bits()),
        },
    ];
    let at: Timestamp = "2025-06-01T12:00:00Z".parse().unwrap();
    if let Ok(tick) = layout.tick_at(at) {
        out.push(IdParts {
            tick,
            datacenter: max(core.datacenter_bits()).min(1),
            worker: max(core.worker_bits()).min(5),
            rollback: 0,
            sequence: max(core.sequence_bits()).min(42),
        });
    }
    out
}

fn render() -> String {
    let mut out = String::from(HEADER);
    for text in LAYOUTS {
        let layout = Layout::parse(text).unwrap();
        for parts in vectors(text) {
            let id = layout.compose(parts).unwrap();
            let d = layout.decode(id).unwrap();
            assert_eq!(d.parts(), parts, "{text}: {id} decodes to other parts");
            out.push_str(&format!(
                "{text}\t{id}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                d.time.as_millisecond(),
                d.tick,
                d.datacenter,
                d.worker,
                d.rollback,
                d.sequence
            ));
        }
    }
    out
}

#[test]
fn the_layout_vectors_file_is_what_the_core_computes() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/testdata/layout-vectors.tsv");
    let want = render();
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have == want {
        return;
    }
    if std::env::var_os("IDMINT_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, want).unwrap();
        return;
    }
    panic!(
        "{} differs from what the core computes; run `IDMINT_BLESS=1 cargo test -p \
         idmint-embed --test it layout_vectors` to write it",
        path.display()
    );
}
