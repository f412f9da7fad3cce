//! The seeder's verdicts, from facts made up here: no files, sockets or users read.

use std::path::PathBuf;

use super::*;
use crate::cmd::doctor::checks::CertFacts;

fn facts() -> SeederFacts {
    let login = LoginFacts {
        now: 0,
        site: Ok((
            vec![PathBuf::from("/etc/teesfs/teesfs.toml")],
            vec![],
            vec![],
        )),
        store: Found::Ok((PathBuf::from("/shared/teesfs"), 3, true, false)),
        cert: CertFacts {
            path: PathBuf::from("/etc/teesfs/cluster/login1.crt"),
            summary: Found::Ok((vec!["login1".into()], 400 * 86_400)),
            unverified: None,
        },
        ca_key: None,
        topology: true,
        trust: vec![(PathBuf::from("/etc/teesfs/trusted/site.pub"), None)],
    };
    let key = FileFacts {
        path: PathBuf::from("/etc/teesfs/cluster/login1.key"),
        stat: Ok((0, 990, 0o100640)),
    };
    SeederFacts {
        login,
        host: "login1.cluster".into(),
        seeder_host: Some("login1:7412".into()),
        listen: "0.0.0.0:7412".into(),
        allow: vec![("slurm".into(), Some(64030))],
        logdir: (PathBuf::from("/var/log/teesfs"), Some(true)),
        munge_socket: (PathBuf::from("/run/munge/munge.socket.2"), true),
        unmunge: true,
        port: PortFacts::Seeder(4242),
        user: ("teesfs".into(), 990, vec![990]),
        reads: vec![key],
    }
}

fn verdict(f: &SeederFacts, name: &str) -> Check {
    evaluate(f)
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} check"))
}

/// A configured seeder passes every check, its own and the login side's.
#[test]
fn a_configured_seeder_passes() {
    let all = evaluate(&facts());
    assert!(all.iter().all(|c| c.level == Level::Ok), "{all:#?}");
    for name in [
        "site",
        "store",
        "certificate",
        "seeder-host",
        "munge",
        "seeder-port",
        "seeder-reads",
    ] {
        assert!(all.iter().any(|c| c.name == name), "{name}");
    }
}

/// Each gap is named with what to do: what breaks every handed-over job fails, what only
/// means the seeder is not (yet) used here warns.
#[test]
fn each_gap_of_a_seeder_is_judged_and_names_its_fix() {
    type Spoil = Box<dyn Fn(&mut SeederFacts)>;
    let cases: Vec<(&str, Level, Spoil)> = vec![
        (
            "seeder-host",
            Level::Warn,
            Box::new(|f| f.seeder_host = None),
        ),
        (
            "seeder-host",
            Level::Warn,
            Box::new(|f| f.seeder_host = Some("dm1:7412".into())),
        ),
        (
            "seeder-allow",
            Level::Fail,
            Box::new(|f| f.allow.push(("slrum".into(), None))),
        ),
        (
            "seeder-logdir",
            Level::Fail,
            Box::new(|f| f.logdir.1 = Some(false)),
        ),
        (
            "seeder-logdir",
            Level::Info,
            Box::new(|f| f.logdir.1 = None),
        ),
        ("munge", Level::Fail, Box::new(|f| f.munge_socket.1 = false)),
        ("munge", Level::Fail, Box::new(|f| f.unmunge = false)),
        (
            "seeder-port",
            Level::Warn,
            Box::new(|f| f.port = PortFacts::Free),
        ),
        (
            "seeder-port",
            Level::Fail,
            Box::new(|f| f.port = PortFacts::Other("pid 7 (nginx)".into())),
        ),
        (
            "seeder-reads",
            Level::Fail,
            Box::new(|f| f.user = ("nobody".into(), 65534, vec![65534])),
        ),
        (
            "seeder-reads",
            Level::Fail,
            Box::new(|f| f.reads[0].stat = Err("Permission denied".into())),
        ),
        (
            "site",
            Level::Fail,
            Box::new(|f| f.login.site = Err("bad toml".into())),
        ),
    ];
    for (name, level, spoil) in cases {
        let mut f = facts();
        spoil(&mut f);
        let c = verdict(&f, name);
        assert_eq!(c.level, level, "{c:?}");
        assert!(c.fix.is_some() || level == Level::Info, "{c:?}");
    }
    let mut f = facts();
    f.port = PortFacts::Other("pid 7 (nginx)".into());
    assert!(verdict(&f, "seeder-port").detail.contains("pid 7 (nginx)"));
    let mut f = facts();
    f.user = ("nobody".into(), 65534, vec![65534]);
    let c = verdict(&f, "seeder-reads");
    assert!(
        c.detail.contains("login1.key") && c.detail.contains("640"),
        "{c:?}"
    );
}

/// Who may read what: root always, then the owner's, the group's or the others' bits; a
/// directory needs read and search.
#[test]
fn read_access_follows_owner_group_and_other_bits() {
    let key = 0o100640;
    assert!(may_read(key, 0, 990, 0, &[]), "root");
    assert!(may_read(key, 5, 990, 5, &[]), "owner");
    assert!(may_read(key, 0, 990, 7, &[990]), "group");
    assert!(!may_read(key, 0, 990, 7, &[100]), "others");
    assert!(!may_read(0o100600, 0, 990, 7, &[990]));
    assert!(may_read(0o100604, 0, 990, 7, &[100]));
    let dir = 0o040750;
    assert!(may_read(dir, 0, 990, 7, &[990]));
    assert!(
        !may_read(0o040740, 0, 990, 7, &[990]),
        "a directory needs search too"
    );
}
