//! `teesfs doctor --role login`: the side that roots every tree (the login node, or where
//! the Slurm prolog's push runs). Gathers what a push needs there: the site configuration,
//! the store, this host's certificate as the root, the topology and the trusted keys; and
//! whether the cluster CA's private key sits here, where every user logs in. The verdicts
//! ([`evaluate`]) are pure.

use std::path::{Path, PathBuf};

use super::checks::{CertFacts, Check, Found, Level, Unreadable};

/// The site configuration as doctor saw it: the files read, the invalid values and the
/// unknown keys (each as its message).
pub type SiteFacts = (Vec<PathBuf>, Vec<String>, Vec<String>);

/// What the login side holds, gathered before any verdict.
#[derive(Debug, Clone)]
pub struct LoginFacts {
    /// Now, in seconds since the Unix epoch.
    pub now: i64,
    /// The site configuration's files read, and its problems (invalid, unknown), or why
    /// it cannot be read at all.
    pub site: Result<SiteFacts, Unreadable>,
    /// The store (`[store] path`): how many indexes, whether a group shares it, whether
    /// this user may write into it; `Missing` when none is configured.
    pub store: Found<(PathBuf, usize, bool, bool)>,
    /// This host's certificate as the tree's root.
    pub cert: CertFacts,
    /// `ca.key` beside the credentials, if it is there.
    pub ca_key: Option<PathBuf>,
    /// Whether the site describes the cluster (`[topology] file` or `cluster`).
    pub topology: bool,
    /// Trusted publisher keys, each with why it does not parse, if it does not.
    pub trust: Vec<(PathBuf, Option<String>)>,
}

fn check(name: &'static str, level: Level, detail: String, fix: Option<&str>) -> Check {
    Check {
        name,
        level,
        detail,
        fix: fix.map(str::to_owned),
    }
}

/// The verdicts, in the order they print.
pub fn evaluate(f: &LoginFacts) -> Vec<Check> {
    vec![
        site(f),
        store(f),
        certificate(f),
        ca_key(f),
        topology(f),
        trust(f),
    ]
}

fn site(f: &LoginFacts) -> Check {
    match &f.site {
        Err(e) => check(
            "site",
            Level::Fail,
            e.to_string(),
            Some("fix the file it names"),
        ),
        Ok((read, invalid, _)) if !invalid.is_empty() => check(
            "site",
            Level::Fail,
            invalid.join("; "),
            Some("fix these values (`teesfs config check` lists every mistake)"),
        ),
        Ok((read, _, unknown)) if !unknown.is_empty() => check(
            "site",
            Level::Warn,
            unknown.join("; "),
            Some("remove or correct the unknown keys (`teesfs config check`)"),
        ),
        Ok((read, _, _)) if read.is_empty() => check(
            "site",
            Level::Warn,
            "no site configuration: every command needs its flags".into(),
            Some("write /etc/teesfs/teesfs.toml (man 5 teesfs.toml)"),
        ),
        Ok((read, _, _)) => check(
            "site",
            Level::Ok,
            format!("{} file(s) read", read.len()),
            None,
        ),
    }
}

fn store(f: &LoginFacts) -> Check {
    match &f.store {
        Found::Missing => check(
            "store",
            Level::Warn,
            "no [store] path: every store command needs --store".into(),
            Some("set [store] path in teesfs.toml"),
        ),
        Found::Bad(e) => check(
            "store",
            Level::Fail,
            e.clone(),
            Some("create the store (`teesfs publish` makes it) or fix [store] path"),
        ),
        Found::Ok((path, indexes, shared, writable)) => {
            let kind = if *shared {
                "shared by its group"
            } else {
                "personal"
            };
            let detail = format!(
                "{}: {indexes} index(es), {kind}, {} by this user",
                path.display(),
                if *writable { "writable" } else { "read-only" }
            );
            check("store", Level::Ok, detail, None)
        }
    }
}

fn certificate(f: &LoginFacts) -> Check {
    let path = f.cert.path.display();
    match (&f.cert.summary, &f.cert.unverified) {
        (Found::Missing, _) => check(
            "certificate",
            Level::Fail,
            format!("{path} is missing: this host cannot root a push"),
            Some(
                "on the admin host: teesfs keygen --cluster CA --nodes THIS_HOST, copy ca.crt, THIS_HOST.crt and THIS_HOST.key here",
            ),
        ),
        (Found::Bad(e), _) | (_, Some(e)) => check(
            "certificate",
            Level::Fail,
            format!("{path}: {e}"),
            Some(
                "issue this host a certificate of the cluster CA (teesfs keygen --cluster CA --nodes THIS_HOST)",
            ),
        ),
        (Found::Ok((_, not_after)), None) => {
            let days = (not_after - f.now) / 86_400;
            if days < super::checks::EXPIRY_WARN_DAYS {
                check(
                    "certificate",
                    Level::Warn,
                    format!("{path} expires in {days} days"),
                    Some("renew it: teesfs keygen --cluster CA --nodes THIS_HOST"),
                )
            } else {
                check(
                    "certificate",
                    Level::Ok,
                    format!("{path}, expires in {days} days"),
                    None,
                )
            }
        }
    }
}

fn ca_key(f: &LoginFacts) -> Check {
    match &f.ca_key {
        Some(p) => check(
            "ca-key",
            Level::Warn,
            format!(
                "{} is on this host, where users log in: whoever takes it can join the tree as any node",
                p.display()
            ),
            Some("move ca.key to an admin host; sign node requests there (teesfs keygen --sign)"),
        ),
        None => check(
            "ca-key",
            Level::Ok,
            "the CA's private key is not here".into(),
            None,
        ),
    }
}

fn topology(f: &LoginFacts) -> Check {
    if f.topology {
        check(
            "topology",
            Level::Ok,
            "the site describes the cluster".into(),
            None,
        )
    } else {
        check(
            "topology",
            Level::Warn,
            "no [topology] file or cluster: every push needs --topology or --cluster".into(),
            Some("set [topology] in teesfs.toml"),
        )
    }
}

fn trust(f: &LoginFacts) -> Check {
    let bad: Vec<String> = f
        .trust
        .iter()
        .filter_map(|(p, e)| e.as_ref().map(|e| format!("{}: {e}", p.display())))
        .collect();
    if !bad.is_empty() {
        check(
            "trust",
            Level::Fail,
            bad.join("; "),
            Some("replace the broken key files"),
        )
    } else if f.trust.is_empty() {
        check(
            "trust",
            Level::Fail,
            "no trusted publisher key: a push cannot open any index".into(),
            Some("copy publishers' .pub files to /etc/teesfs/trusted/"),
        )
    } else {
        check(
            "trust",
            Level::Ok,
            format!("{} key(s)", f.trust.len()),
            None,
        )
    }
}

/// What the store at `path` holds and allows.
pub fn store_facts(path: Option<&Path>) -> Found<(PathBuf, usize, bool, bool)> {
    let Some(path) = path else {
        return Found::Missing;
    };
    let indexes = match seeder::DirStore::open(path).and_then(|s| s.list_indexes()) {
        Ok(ids) => ids.len(),
        Err(e) => return Found::Bad(e.to_string()),
    };
    let writable = nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok();
    Found::Ok((
        path.to_path_buf(),
        indexes,
        seeder::shared::is_shared(path),
        writable,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> LoginFacts {
        LoginFacts {
            now: 0,
            site: Ok((
                vec![PathBuf::from("/etc/teesfs/teesfs.toml")],
                vec![],
                vec![],
            )),
            store: Found::Ok((PathBuf::from("/shared/teesfs"), 3, true, true)),
            cert: CertFacts {
                path: PathBuf::from("/etc/teesfs/cluster/login1.crt"),
                summary: Found::Ok((vec!["login1".into()], 400 * 86_400)),
                unverified: None,
            },
            ca_key: None,
            topology: true,
            trust: vec![(PathBuf::from("/etc/teesfs/trusted/site.pub"), None)],
        }
    }

    fn level(f: &LoginFacts, name: &str) -> Level {
        evaluate(f)
            .into_iter()
            .find(|c| c.name == name)
            .map(|c| c.level)
            .expect(name)
    }

    #[test]
    fn a_configured_login_side_passes_and_each_gap_is_named_with_its_fix() {
        let good = facts();
        assert!(evaluate(&good).iter().all(|c| c.level == Level::Ok));
        let mut f = facts();
        f.ca_key = Some(PathBuf::from("/etc/teesfs/cluster/ca.key"));
        assert_eq!(level(&f, "ca-key"), Level::Warn);
        let mut f = facts();
        f.cert.summary = Found::Missing;
        assert_eq!(level(&f, "certificate"), Level::Fail);
        let mut f = facts();
        f.cert.summary = Found::Ok((vec!["login1".into()], 10 * 86_400));
        assert_eq!(level(&f, "certificate"), Level::Warn, "expires in 10 days");
        let mut f = facts();
        f.site = Ok((
            vec![PathBuf::from("x")],
            vec!["[tree] width must be at least 1".into()],
            vec![],
        ));
        assert_eq!(level(&f, "site"), Level::Fail);
        let mut f = facts();
        f.store = Found::Bad("no indexes".into());
        assert_eq!(level(&f, "store"), Level::Fail);
        let mut f = facts();
        f.trust.clear();
        assert_eq!(level(&f, "trust"), Level::Fail);
        let mut f = facts();
        f.topology = false;
        assert_eq!(level(&f, "topology"), Level::Warn);
    }
}
