//! The registries that ask no coordinator, through `idmint.config`: `static`
//! (the worker written in the config), `host` (the low bits of a private IPv4
//! address, as sonyflake takes them) and `k8s` (the StatefulSet ordinal at the
//! end of the pod's host name). Each keeps its marks in the cluster's data
//! directory, so a restart issues above every earlier ID; a setting that gives
//! no worker is `invalid_config`, never an ID.

use crate::cluster::Cluster;
use crate::{CREATE, INSERT, assert_idmint_error, config_file, inserts_go_on_above, max_id, say};

/// The worker `idmint_status()` reports, datacenter and worker bits joined as
/// the default layout (twitter: 5 datacenter bits over 5 worker bits) puts
/// them in an ID; checked against `idmint_decode` of the newest ID.
fn status_worker(client: &mut postgres::Client, registry: &str) -> i32 {
    let row = client
        .query_one(
            "SELECT s.registry, s.lease, s.datacenter, s.worker, d.datacenter, d.worker
             FROM idmint_status() s, idmint_decode((SELECT max(id) FROM t)) d",
            &[],
        )
        .unwrap();
    let (name, lease): (String, String) = (row.get(0), row.get(1));
    assert_eq!((name.as_str(), lease.as_str()), (registry, "held"));
    let (dc, worker, id_dc, id_worker): (i32, i32, i32, i32) =
        (row.get(2), row.get(3), row.get(4), row.get(5));
    assert_eq!(
        (dc, worker),
        (id_dc, id_worker),
        "the IDs carry another worker"
    );
    dc << 5 | worker
}

/// Each registry gives the worker its setting names, the IDs carry it, and a
/// clean restart goes on above every earlier ID.
#[test]
fn static_host_and_k8s_workers_come_from_their_settings() {
    for (registry, section, expected) in [
        ("static", "worker = 37\n", 37),
        // 10.0.3.7: its low 10 bits, 3 * 256 + 7.
        ("host", "\n[snowflake.host]\naddress = \"10.0.3.7\"\n", 775),
        (
            "k8s",
            "\n[snowflake.k8s]\nhostname = \"idmint-pg-12\"\n",
            12,
        ),
    ] {
        let config = config_file(
            &format!("fixed-{registry}"),
            &format!("[snowflake]\nregistry = \"{registry}\"\n{section}"),
        );
        let cluster = Cluster::start_with(&format!("fixed-{registry}"), &config.setting());
        let mut client = cluster.client();
        client.batch_execute(CREATE).unwrap();
        cluster.insert(4, 500, INSERT, 1);
        assert_eq!(status_worker(&mut client, registry), expected, "{registry}");
        let max_before = max_id(&mut client);
        drop(client);

        cluster.restart();
        inserts_go_on_above(&cluster, max_before, 500, 4_000);
        assert_eq!(
            status_worker(&mut cluster.client(), registry),
            expected,
            "{registry}"
        );
        say(&format!(
            "{registry}: worker {expected}, 4,000 IDs across a restart, no duplicate"
        ));
    }
}

/// A setting that gives no worker: the call fails with `invalid_config`
/// (22023) naming the setting, and the table gets no row.
#[test]
fn a_setting_that_gives_no_worker_is_invalid_config() {
    let cluster = Cluster::start("fixed-bad");
    cluster.client().batch_execute(CREATE).unwrap();
    for (name, config, setting) in [
        // Past the default layout's 1,024 workers.
        (
            "static",
            "[snowflake]\nregistry = \"static\"\nworker = 5000\n",
            "snowflake.worker",
        ),
        // A public address: two hosts on the internet share no subnet plan.
        (
            "host",
            "[snowflake]\nregistry = \"host\"\n\n[snowflake.host]\naddress = \"8.8.8.8\"\n",
            "snowflake.host.address",
        ),
        // A host name with no StatefulSet ordinal.
        (
            "k8s",
            "[snowflake]\nregistry = \"k8s\"\n\n[snowflake.k8s]\nhostname = \"web\"\n",
            "snowflake.k8s.hostname",
        ),
    ] {
        let file = config_file(&format!("fixed-bad-{name}"), config);
        // The last `idmint.config` line in postgresql.conf wins.
        cluster.restart_with(&file.setting());
        let mut client = cluster.client();
        let err = client.execute(INSERT, &[&1]).unwrap_err();
        assert_idmint_error(&err, "22023", &["invalid_config"]);
        let message = err.as_db_error().unwrap().message().to_owned();
        assert!(message.contains(setting), "{name}: {message}");
        let n: i64 = client
            .query_one("SELECT count(*) FROM t", &[])
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{name}: a failed insert left a row");
        say(&format!("{name}: {message}"));
    }
}
