//! Several hosts in one URL, against real servers started by the project's
//! scripts: a PostgreSQL primary with a streaming standby
//! (`scripts/postgres standby`) and a MariaDB primary with a replica
//! (`scripts/mariadb replica`). The pool settles on the writable host
//! whatever the order, reports each host's role, and follows a promotion
//! with the old primary stopped; the longest pause in a stream of writes
//! through the promotion is printed (docs/operating.md quotes it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idmint_sql::{ConnectOptions, Database, Error, HostRole, on_pool, survey};
use idmint_testkit::{PrivateService, Service};

/// The primary's URL, the standby's, and the two-host URL (primary first),
/// from the service's env files.
struct Pair {
    primary: String,
    standby: String,
    both: String,
}

impl Pair {
    fn start(service: Service) -> Option<(PrivateService, Pair)> {
        let db = PrivateService::start(service)?;
        let pair = match service {
            Service::Postgres => {
                db.action("standby");
                Pair {
                    primary: db.address().to_owned(),
                    standby: db.env("standby.env", "IDMINT_TEST_POSTGRES_STANDBY_URL"),
                    both: db.env("standby.env", "IDMINT_TEST_POSTGRES_PAIR_URL"),
                }
            }
            _ => {
                db.action("replica");
                Pair {
                    primary: db.address().to_owned(),
                    standby: db.env("replica.env", "IDMINT_TEST_MYSQL_REPLICA_URL"),
                    both: db.env("replica.env", "IDMINT_TEST_MYSQL_PAIR_URL"),
                }
            }
        };
        Some((db, pair))
    }

    /// The `host:port` of a one-host URL.
    fn host(url: &str) -> String {
        idmint_sql::url_hosts(url).unwrap().remove(0)
    }

    /// The two hosts, the standby listed first.
    fn standby_first(&self) -> String {
        let (head, rest) = self.both.split_once("://").unwrap();
        let (auth, path) = rest.split_once('/').unwrap();
        let (user, _) = auth.split_once('@').unwrap();
        format!(
            "{head}://{user}@{},{}/{path}",
            Self::host(&self.standby),
            Self::host(&self.primary)
        )
    }
}

fn options(url: &str) -> ConnectOptions {
    ConnectOptions::new(url.to_owned())
        .with_connect_timeout(Duration::from_secs(2))
        .with_max_connections(2)
}

async fn exec(db: &Database, sql: &str) -> Result<(), sqlx::Error> {
    on_pool!(db.pool(), p => sqlx::raw_sql(sql).execute(p).await.map(|_| ()))
}

async fn settles_on_the_primary(service: Service) {
    let Some((_db, pair)) = Pair::start(service) else {
        return;
    };
    let reversed = pair.standby_first();
    let db = Database::connect(&options(&reversed)).await.unwrap();
    assert_eq!(db.target_host(), Some(Pair::host(&pair.primary).as_str()));
    exec(&db, "CREATE TABLE settled (n INT PRIMARY KEY)")
        .await
        .unwrap();
    exec(&db, "INSERT INTO settled VALUES (1)").await.unwrap();

    let roles = survey(&options(&reversed)).await.unwrap();
    let seen: Vec<(&str, &HostRole)> = roles.iter().map(|r| (r.host.as_str(), &r.role)).collect();
    assert_eq!(
        seen,
        [
            (Pair::host(&pair.standby).as_str(), &HostRole::Standby),
            (Pair::host(&pair.primary).as_str(), &HostRole::Primary),
        ]
    );
    assert_eq!(db.hosts().await, roles);
    // The standby streams asynchronously (the scripts set up no synchronous
    // or semi-synchronous replication), and the primary says so.
    assert_eq!(roles[0].replication, None);
    assert_eq!(
        roles[1].replication,
        Some(idmint_sql::Replication {
            synchronous: 0,
            asynchronous: 1,
            unknown: 0,
        })
    );

    // The standby alone, asked to be writable: no writable host, a transient
    // error naming what each host is.
    let only_standby = match service {
        Service::Postgres => format!("{}?target_session_attrs=read-write", pair.standby),
        _ => format!(
            "mysql://root@{},{}/idmint",
            Pair::host(&pair.standby),
            Pair::host(&pair.standby)
        ),
    };
    let err = Database::connect(&options(&only_standby))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoWritableHost { .. }), "{err}");
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("standby (read-only)"), "{err}");
    db.close().await;
}

/// Writes one row every 10 ms through a two-host URL (primary first) while
/// the standby is promoted with the primary stopped, and for a second after;
/// every write is retried until it lands. The pool must end up on the
/// promoted host, every row written must be there, and the longest pause
/// between two landed writes is printed.
async fn follows_a_promotion(service: Service) {
    let Some((db_service, pair)) = Pair::start(service) else {
        return;
    };
    let db = Database::connect(&options(&pair.both)).await.unwrap();
    assert_eq!(db.target_host(), Some(Pair::host(&pair.primary).as_str()));
    exec(&db, "CREATE TABLE followed (n INT PRIMARY KEY)")
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut landed = Vec::new();
            let mut failed = 0_u32;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let sql = format!("INSERT INTO followed VALUES ({n})");
                    match exec(&db, &sql).await {
                        Ok(()) => break,
                        // A write whose connection broke may have landed.
                        Err(e) if idmint_sql::is_unique_violation(&e) => break,
                        Err(e) => {
                            failed += 1;
                            assert!(Instant::now() < deadline, "write {n} failed for 20 s: {e}");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                landed.push(Instant::now());
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (landed, failed)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let promoting = Instant::now();
    let action = match service {
        Service::Postgres => "promote-standby",
        _ => "promote",
    };
    let promoted = tokio::task::spawn_blocking(move || {
        let url = db_service.action(action);
        (db_service, url)
    });
    let (db_service, promoted_url) = promoted.await.unwrap();
    let promoted_in = promoting.elapsed();
    let promoted_at = Instant::now();
    assert_eq!(Pair::host(&promoted_url), Pair::host(&pair.standby));
    // Writes go on for a second on the promoted server.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (landed, failed) = writer.await.unwrap();

    let gap = landed.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        landed.iter().filter(|at| **at > promoted_at).count() > 10,
        "no writes after the promotion"
    );
    assert_eq!(db.target_host(), Some(Pair::host(&pair.standby).as_str()));
    let n_rows: i64 = on_pool!(db.pool(), p => {
        sqlx::query_scalar("SELECT COUNT(*) FROM followed").fetch_one(p).await
    })
    .unwrap();
    assert_eq!(
        n_rows,
        landed.len() as i64,
        "rows lost through the promotion"
    );
    let roles = db.hosts().await;
    assert!(
        matches!(roles[0].role, HostRole::Unreachable { .. }) && roles[1].role == HostRole::Primary,
        "{roles:?}"
    );
    eprintln!(
        "{} promotion through a two-host url: the script took {promoted_in:?}; the longest \
         pause between writes was {gap:?} ({failed} failed attempts)",
        db_service.name()
    );
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_multi_host_url_settles_on_the_primary() {
    settles_on_the_primary(Service::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_host_list_settles_on_the_primary() {
    settles_on_the_primary(Service::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_multi_host_url_follows_a_promotion() {
    follows_a_promotion(Service::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_host_list_follows_a_promotion() {
    follows_a_promotion(Service::MariaDb).await;
}

/// A node connecting to a standby that is about to be promoted waits for the
/// promotion within its connect timeout rather than failing with "no
/// writable host".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_during_a_promotion_waits_for_it() {
    let Some((db_service, pair)) = Pair::start(Service::Postgres) else {
        return;
    };
    // The standby alone, asked to be writable: nothing is until the
    // promotion (which stops the primary first).
    let standby = format!("{}?target_session_attrs=read-write", pair.standby);
    let promoting = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(500));
        db_service.action("promote-standby");
        db_service
    });
    let started = Instant::now();
    let db = Database::connect(&options(&standby).with_connect_timeout(Duration::from_secs(20)))
        .await
        .expect("the connect waits for the promotion");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert_eq!(db.target_host(), Some(Pair::host(&pair.standby).as_str()));
    exec(&db, "CREATE TABLE waited (n INT)").await.unwrap();
    let _service = promoting.await.unwrap();
    db.close().await;
}

/// A pool with no connection left when its primary is stopped and the
/// standby promoted: no hook runs (sqlx keeps knocking at the dead target),
/// so `Database::pool` starts the search. The next statement lands on the
/// promoted host within the connect timeout, without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_pool_finds_the_promoted_standby() {
    let Some((db_service, pair)) = Pair::start(Service::Postgres) else {
        return;
    };
    let db = Database::connect(&options(&pair.both)).await.unwrap();
    exec(&db, "CREATE TABLE emptied (n INT PRIMARY KEY)")
        .await
        .unwrap();
    // Close the pool's connections: the pool is left empty.
    let idmint_sql::Pool::Postgres(pool) = db.pool() else {
        unreachable!()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.size() > 0 {
        // Idle ones only: one may still be on its way back from a statement.
        match pool.try_acquire() {
            Some(conn) => conn.close().await.unwrap(),
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
        assert!(
            Instant::now() < deadline,
            "the pool keeps {} connections",
            pool.size()
        );
    }

    let promoted = tokio::task::spawn_blocking(move || {
        db_service.action("promote-standby");
        db_service
    })
    .await
    .unwrap();
    let started = Instant::now();
    exec(&db, "INSERT INTO emptied VALUES (1)")
        .await
        .expect("the pool finds the promoted standby within one acquire");
    let took = started.elapsed();
    assert_eq!(db.target_host(), Some(Pair::host(&pair.standby).as_str()));
    eprintln!("an empty pool reached the promoted standby in {took:?}");
    drop(promoted);
    db.close().await;
}
