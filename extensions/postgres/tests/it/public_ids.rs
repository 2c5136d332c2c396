//! `idmint_obfuscate` / `idmint_reveal` with a config file's `[obfuscation]`
//! section, against `idmint obfuscate` and `idmint reveal` with the same keys.

use std::process::Command;

use crate::cluster::Cluster;
use crate::{assert_idmint_error, config_file, idmint_bin};

const KEY_A: &str = "2b7e151628aed2a6abf7158809cf4f3c";
const KEY_B: &str = "000102030405060708090a0b0c0d0e0f";

/// `idmint obfuscate|reveal ARGS...` with the two keys (key IDs 1 and 2)
/// and 2 key-ID bits, one number per line.
fn cli(command: &str, args: &[String]) -> Vec<i64> {
    let bin = idmint_bin();
    let out = Command::new(&bin)
        .arg(command)
        .args(["--bits", "63", "--key-id-bits", "2"])
        .args(args)
        .env("IDMINT_OBFUSCATION_KEY", format!("1:{KEY_A} 2:{KEY_B}"))
        .output()
        .unwrap_or_else(|e| panic!("running {bin} (build it with `cargo build -p idmint`): {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

#[test]
fn public_ids_agree_with_the_cli_and_bad_input_is_refused() {
    // The file registry (the config's default) with its data in $PGDATA/idmint.
    let config = config_file(
        "public",
        &format!("[obfuscation]\nkey = \"1:{KEY_A} 2:{KEY_B}\"\nbits = 63\nkey_id_bits = 2\n"),
    );
    let cluster = Cluster::start_with("public", &config.setting());
    let mut client = cluster.client();
    client.batch_execute("CREATE EXTENSION idmint").unwrap();
    let registry: String = client
        .query_one("SELECT registry FROM idmint_status()", &[])
        .unwrap()
        .get(0);
    assert_eq!(registry, "file");

    let mut ids: Vec<i64> = client
        .query("SELECT * FROM idmint_next_ids(5)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    ids.extend([0, 1, 123_456_789, (1 << 61) - 1]);
    let args: Vec<String> = ids.iter().map(i64::to_string).collect();

    // The active key (the last listed, 2), as the CLI and the server use it.
    let ours: Vec<i64> = ids
        .iter()
        .map(|id| {
            client
                .query_one("SELECT idmint_obfuscate($1)", &[id])
                .unwrap()
                .get(0)
        })
        .collect();
    assert_eq!(ours, cli("obfuscate", &args), "for {ids:?}");
    assert!(ours.iter().zip(&ids).all(|(p, id)| p != id));
    for (public, id) in ours.iter().zip(&ids) {
        let back: i64 = client
            .query_one("SELECT idmint_reveal($1)", &[public])
            .unwrap()
            .get(0);
        assert_eq!(back, *id);
    }
    // A public ID of the other key in the ring (made by the CLI) reveals too.
    let mut key_one = args.clone();
    key_one.extend(["--key-id".to_owned(), "1".to_owned()]);
    for (public, id) in cli("obfuscate", &key_one).iter().zip(&ids) {
        let back: i64 = client
            .query_one("SELECT idmint_reveal($1)", &[public])
            .unwrap()
            .get(0);
        assert_eq!(back, *id, "public {public} of key 1");
    }
    // And the CLI reveals ours.
    let publics: Vec<String> = ours.iter().map(i64::to_string).collect();
    assert_eq!(cli("reveal", &publics), ids);

    for (sql, sqlstate, code) in [
        ("SELECT idmint_obfuscate(-1)", "22023", "invalid_id"),
        // Wider than 63 - 2 key-ID bits.
        (
            "SELECT idmint_obfuscate(9223372036854775807)",
            "22023",
            "invalid_id",
        ),
        ("SELECT idmint_reveal(-7)", "22023", "invalid_public_id"),
        // Key-ID bits 3: no such key in the ring.
        (
            "SELECT idmint_reveal(6917529027641081856 + 12345)",
            "22023",
            "unknown_key_id",
        ),
    ] {
        let err = client.query_one(sql, &[]).unwrap_err();
        assert_idmint_error(&err, sqlstate, &[code]);
    }
}
