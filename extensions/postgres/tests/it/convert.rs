//! The README's guide to converting a `bigserial` or identity column, run
//! as written (the statements below are the README's, in both languages; a
//! test fails when they drift apart): existing rows kept, new IDs above the
//! old maximum, no duplicate, and the check refusing a table it can't
//! convert, changing nothing.

use crate::cluster::Cluster;

/// The guide's conversion of a `bigserial` column.
const CONVERT_BIGSERIAL: &str = "BEGIN;
ALTER TABLE orders ALTER COLUMN id SET DEFAULT idmint_next_id();
DROP SEQUENCE orders_id_seq;
DO $$
DECLARE
    old_max bigint := (SELECT max(id) FROM orders);
    first_new bigint := idmint_next_id();
BEGIN
    IF old_max >= first_new THEN
        RAISE EXCEPTION 'orders.id has % , not below idmint''s IDs (%): not converted',
            old_max, first_new;
    END IF;
END $$;
COMMIT;";

/// The guide's conversion of an identity column.
const CONVERT_IDENTITY: &str = "BEGIN;
ALTER TABLE orders ALTER COLUMN id DROP IDENTITY;
ALTER TABLE orders ALTER COLUMN id SET DEFAULT idmint_next_id();
DO $$
DECLARE
    old_max bigint := (SELECT max(id) FROM orders);
    first_new bigint := idmint_next_id();
BEGIN
    IF old_max >= first_new THEN
        RAISE EXCEPTION 'orders.id has % , not below idmint''s IDs (%): not converted',
            old_max, first_new;
    END IF;
END $$;
COMMIT;";

/// The guide's check that the column is `bigint`.
const TYPE_CHECK: &str = "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = 'orders'::regclass AND attname = 'id';";

fn readmes() -> Vec<(String, String)> {
    ["README.md", "README.zh-CN.md"]
        .iter()
        .map(|name| {
            let path = format!("{}/{name}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            (name.to_string(), text)
        })
        .collect()
}

/// `text` with each line's indent removed (the READMEs indent their code
/// blocks inside a numbered list).
fn unindented(text: &str) -> String {
    text.lines()
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_readme_guides_are_what_is_tested() {
    for (name, text) in readmes() {
        let text = unindented(&text);
        for sql in [CONVERT_BIGSERIAL, CONVERT_IDENTITY, TYPE_CHECK] {
            assert!(
                text.contains(&unindented(sql)),
                "{name} does not hold the tested SQL:\n{sql}"
            );
        }
    }
}

/// Converts `orders` (made by `create`, filled by its sequence) with
/// `convert`, then 4 connections insert with the new default.
fn convert(cluster: &Cluster, create: &str, convert: &str) {
    let mut client = cluster.client();
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS orders;
             {create};
             INSERT INTO orders (round) SELECT 0 FROM generate_series(1, 1000);"
        ))
        .unwrap();
    let ty: String = client.query_one(TYPE_CHECK, &[]).unwrap().get(0);
    assert_eq!(ty, "bigint");
    let old_max: i64 = client
        .query_one("SELECT max(id) FROM orders", &[])
        .unwrap()
        .get(0);
    client.batch_execute(convert).unwrap();
    cluster.insert(4, 500, "INSERT INTO orders (round) VALUES ($1)", 1);
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT id), min(id) FILTER (WHERE round = 1),
                    pg_get_serial_sequence('orders', 'id') IS NULL
             FROM orders",
            &[],
        )
        .unwrap();
    let (n, distinct, min_new, no_sequence): (i64, i64, i64, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!((n, distinct), (3000, 3000));
    assert!(min_new > old_max, "new ID {min_new}, old max {old_max}");
    assert!(no_sequence, "the column still owns a sequence");
}

#[test]
fn bigserial_and_identity_columns_convert_as_the_readme_says() {
    let cluster = Cluster::start("convert");
    let mut client = cluster.client();
    client.batch_execute("CREATE EXTENSION idmint").unwrap();
    convert(
        &cluster,
        "CREATE TABLE orders (id bigserial PRIMARY KEY, round int NOT NULL)",
        CONVERT_BIGSERIAL,
    );
    convert(
        &cluster,
        "CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, round int NOT NULL)",
        CONVERT_IDENTITY,
    );

    // A table whose ids are already above idmint's: the check refuses and
    // the transaction changes nothing (the sequence and its default stay).
    client
        .batch_execute(
            "DROP TABLE orders;
             CREATE TABLE orders (id bigserial PRIMARY KEY, round int NOT NULL);
             INSERT INTO orders (id, round) VALUES (9000000000000000000, 0);",
        )
        .unwrap();
    let err = client.batch_execute(CONVERT_BIGSERIAL).unwrap_err();
    let db = err.as_db_error().expect("the check's exception");
    assert!(db.message().contains("not converted"), "{db}");
    client.batch_execute("ROLLBACK").unwrap();
    let default: String = client
        .query_one(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef
             WHERE adrelid = 'orders'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(default.starts_with("nextval("), "{default}");
}
