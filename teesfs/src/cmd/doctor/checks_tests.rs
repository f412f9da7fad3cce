//! Tests of `teesfs doctor`'s verdicts ([`super`]), on facts made up for each case.

use super::*;

fn healthy() -> Facts {
    Facts {
        now: 1_000_000_000,
        host: "cn01".into(),
        dev_fuse: Found::Ok(()),
        kernel: Some("6.12.48+deb13-amd64".into()),
        userns_clone: None,
        max_user_namespaces: Some(15000),
        cert: CertFacts {
            path: "/etc/teesfs/cluster/cn01.crt".into(),
            summary: Found::Ok((vec!["cn01".into()], 1_000_000_000 + 400 * 86_400)),
            unverified: None,
        },
        uid: 0,
        denied: Vec::new(),
        crl: Found::Missing,
        trust: vec![("/etc/teesfs/trusted/site.pub".into(), None)],
        daemon: Found::Ok(DaemonFacts {
            listen: "0.0.0.0:7411".into(),
            store_bytes: 0,
            store_pinned: 0,
            store_cached: 0,
            clock_skew_ms: Some(-35),
        }),
        port: ("0.0.0.0:7411".into(), None),
        login: Some("login1".into()),
        store: ("/run/teesfs".into(), Some(8 << 30), 4 << 30),
        slurm: SlurmFacts {
            slurm_conf: true,
            plugin: true,
            epilog: true,
            prolog: true,
            learn: true,
            dir: "/etc/slurm".into(),
        },
    }
}

fn level(f: &Facts, name: &str) -> Level {
    evaluate(f)
        .into_iter()
        .find(|c| c.name == name)
        .map(|c| c.level)
        .expect("check")
}

#[test]
fn a_healthy_node_has_no_failure_or_warning() {
    let checks = evaluate(&healthy());
    for c in &checks {
        assert!(matches!(c.level, Level::Ok | Level::Info), "{c:?}");
        assert!(c.fix.is_none(), "{c:?}");
    }
    let r = Report::of("cn01".into(), checks);
    assert_eq!((r.failed, r.warned), (0, 0));
    let clock = r.checks.iter().find(|c| c.name == "clock").expect("clock");
    assert!(clock.detail.contains("behind login1"), "{clock:?}");
}

/// The clock is judged from what the daemon measured, never assumed.
#[test]
fn the_clock_is_judged_from_the_skew_the_daemon_measured() {
    let with = |skew: Option<i64>| {
        let mut f = healthy();
        if let Found::Ok(d) = &mut f.daemon {
            d.clock_skew_ms = skew;
        }
        level(&f, "clock")
    };
    assert_eq!(with(Some(1_500)), Level::Ok);
    assert_eq!(with(Some(-20_000)), Level::Warn);
    assert_eq!(with(Some(600_000)), Level::Fail);
    assert_eq!(with(None), Level::Info);
    let mut f = healthy();
    f.daemon = Found::Missing;
    assert_eq!(level(&f, "clock"), Level::Info);
}

#[test]
fn what_breaks_a_job_fails_with_a_fix_and_what_degrades_warns() {
    let mut f = healthy();
    f.dev_fuse = Found::Missing;
    assert_eq!(level(&f, "fuse"), Level::Fail);
    let mut f = healthy();
    f.userns_clone = Some(0);
    assert_eq!(level(&f, "user-namespaces"), Level::Fail);
    let mut f = healthy();
    f.cert.summary = Found::Missing;
    let c = evaluate(&f)
        .into_iter()
        .find(|c| c.name == "certificate")
        .expect("c");
    assert_eq!(c.level, Level::Fail);
    assert!(
        c.fix
            .as_deref()
            .is_some_and(|x| x.contains("keygen --cluster")),
        "{c:?}"
    );
    let mut f = healthy();
    f.cert.summary = Found::Ok((vec!["cn02".into()], f.now + 400 * 86_400));
    assert_eq!(level(&f, "certificate"), Level::Fail, "another host's");
    let mut f = healthy();
    f.cert.summary = Found::Ok((vec!["cn01".into()], f.now + 3 * 86_400));
    assert_eq!(level(&f, "certificate"), Level::Warn, "expires in 3 days");
    let mut f = healthy();
    f.cert.unverified = Some("not signed by ca.crt".into());
    assert_eq!(level(&f, "certificate"), Level::Fail);
    let mut f = healthy();
    f.crl = Found::Bad("crl.pem: not a revocation list".into());
    assert_eq!(level(&f, "crl"), Level::Fail);
    let now = f.now;
    let listed = |next_update| teesfs_node::net::crl::CrlFacts {
        number: Some(3),
        this_update: now - 2 * 86_400,
        next_update,
        revoked: vec![vec![1], vec![2]],
    };
    f.crl = Found::Ok(listed(Some(now - 86_400)));
    assert_eq!(level(&f, "crl"), Level::Warn);
    f.crl = Found::Ok(listed(Some(now + 10 * 86_400)));
    let c = evaluate(&f)
        .into_iter()
        .find(|c| c.name == "crl")
        .expect("crl");
    assert_eq!(c.level, Level::Ok);
    assert!(
        c.detail
            .contains("number 3, 2 revoked, issued 2 days ago, next update in 10 days"),
        "{}",
        c.detail
    );
    let mut f = healthy();
    f.trust = Vec::new();
    assert_eq!(level(&f, "publisher-keys"), Level::Fail);
    let mut f = healthy();
    f.daemon = Found::Bad("connection refused".into());
    f.port.1 = Some("address in use".into());
    assert_eq!(level(&f, "port"), Level::Fail);
    assert_eq!(level(&f, "daemon"), Level::Fail);
    let mut f = healthy();
    f.store.1 = Some(1 << 30);
    assert_eq!(level(&f, "store"), Level::Warn);
    let mut f = healthy();
    f.slurm.plugin = false;
    assert_eq!(level(&f, "slurm"), Level::Warn);
    f.slurm.slurm_conf = false;
    assert_eq!(level(&f, "slurm"), Level::Info);
    // Without the EpilogSlurmctld everything works; the urgent set is not learned.
    let mut f = healthy();
    f.slurm.learn = false;
    assert_eq!(level(&f, "slurm"), Level::Info);
    let c = evaluate(&f)
        .into_iter()
        .find(|c| c.name == "slurm")
        .expect("slurm");
    assert!(
        c.fix
            .as_deref()
            .is_some_and(|x| x.contains("EpilogSlurmctld=")),
        "{c:?}"
    );
    let mut f = healthy();
    f.kernel = Some("5.10.0-30-amd64".into());
    assert_eq!(level(&f, "passthrough"), Level::Warn);
    f.kernel = Some("weird".into());
    assert_eq!(level(&f, "passthrough"), Level::Info);
    for c in evaluate(&f) {
        if matches!(c.level, Level::Warn | Level::Fail) {
            assert!(c.fix.is_some(), "{c:?}");
        }
    }
}

#[test]
fn kernel_releases_parse() {
    assert_eq!(kernel_version("6.12.48+deb13-amd64"), Some((6, 12)));
    assert_eq!(kernel_version("6.9-rc1"), Some((6, 9)));
    assert_eq!(kernel_version("4.18.0-553.el8_10.x86_64"), Some((4, 18)));
    assert_eq!(kernel_version("x"), None);
}

/// Issue 29: as a non-root user, doctor could not read the node's key (0600 root) and
/// reported the certificate as a FAIL with "reissue it" as the fix. It is a WARN that says
/// who cannot read what, and to run as root.
#[test]
fn doctor_as_non_root_warns_it_cannot_read_the_key_instead_of_failing_with_a_reissue() {
    let mut f = healthy();
    f.uid = 1000;
    f.cert.unverified = Some("reading /etc/teesfs/cluster/cn01.key: Permission denied".into());
    f.denied = vec!["/etc/teesfs/cluster/cn01.key".into()];
    let c = evaluate(&f)
        .into_iter()
        .find(|c| c.name == "certificate")
        .expect("check");
    assert_eq!(c.level, Level::Warn, "{c:?}");
    assert!(
        c.detail
            .contains("cannot read /etc/teesfs/cluster/cn01.key as uid 1000"),
        "{c:?}"
    );
    let fix = c.fix.expect("a fix");
    assert!(fix.contains("as root") && !fix.contains("keygen"), "{fix}");

    // The CRL likewise; a certificate that is readable but for another host still FAILs.
    f.crl = Found::Bad("reading crl.pem: Permission denied".into());
    f.denied.push("/etc/teesfs/cluster/crl.pem".into());
    assert_eq!(level(&f, "crl"), Level::Warn);
    f.denied.clear();
    assert_eq!(level(&f, "crl"), Level::Fail);
    f.cert.summary = Found::Missing;
    assert_eq!(level(&f, "certificate"), Level::Fail, "missing is missing");
}
