//! Helpers shared by the integration tests.

use std::io::Write;

/// Whether a test that needs `name` should run: `true` when `reachable`.
///
/// When the service is down, under `CI=true` this panics (CI must have every
/// service), and elsewhere it prints a loud SKIPPED line and returns `false`,
/// so a laptop without the service still runs the rest.
///
/// # Panics
/// Under `CI=true` when `reachable` is `false`.
pub fn require_service(name: &str, reachable: bool) -> bool {
    if reachable {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{name} is not reachable and CI=true: start {name} before running the tests");
    }
    // Written to the real stderr, not through `eprintln!`, which the test
    // harness captures and hides for passing tests: a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {name} is not reachable; this test did not run (set CI=true to fail instead)"
    );
    false
}

/// PostgreSQL for the tests.
pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// MariaDB for the tests.
pub const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// Redis for the tests.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/";
