//! The site configuration (`/etc/teesfs/teesfs.toml`, see `teesfs.toml(5)`) as the
//! defaults of the command line: every flag a key stands for takes the site's value as its
//! default, so a flag given on the command line overrides the file for that run, and
//! `--help` shows the site's values. `prefetch` reads the same configuration for what its
//! job spec leaves out.

use std::ffi::OsString;

use manifest::SiteConfig;

/// Flags that choose the topology: one given on the command line replaces the site's
/// topology altogether (a site file and a command-line group size do not mix).
const TOPOLOGY_FLAGS: [&str; 3] = ["--topology", "--cluster", "--group-size"];

/// A value for clap's defaults, which must live for the whole run.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// `(argument id, default values)` the site configuration sets.
fn defaults(site: &SiteConfig, argv: &[OsString]) -> Vec<(&'static str, Vec<&'static str>)> {
    let path = |p: &std::path::Path| leak(p.display().to_string());
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    let mut one = |id: &'static str, v: Option<&'static str>| {
        if let Some(v) = v {
            out.push((id, vec![v]));
        }
    };
    one("store", site.store.path.as_deref().map(path));
    one("shared_store", site.store.shared.as_deref().map(path));
    one("origin", site.store.origin().map(path));
    one("login", site.root.host.clone().map(leak));
    let topology_given = argv.iter().any(|a| {
        TOPOLOGY_FLAGS
            .iter()
            .any(|f| a.to_str().is_some_and(|a| a.starts_with(f)))
    });
    if !topology_given {
        one("topology", site.topology.file.as_deref().map(path));
        one("cluster", site.topology.cluster.clone().map(leak));
        one(
            "group_size",
            site.topology.group_size.map(|n| leak(n.to_string())),
        );
    }
    one("links", site.topology.links.clone().map(leak));
    one("strategy", site.tree.strategy.clone().map(leak));
    one("width", site.tree.width.map(|n| leak(n.to_string())));
    one(
        "threshold",
        site.tree.threshold.map(|n| leak(n.to_string())),
    );
    one(
        "login_copies",
        site.tree.login_copies.map(|n| leak(n.to_string())),
    );
    one("identity", site.network.identity.as_deref().map(path));
    one("hosts", site.network.hosts.as_deref().map(path));
    one("port", site.network.port.map(|n| leak(n.to_string())));
    one("timeout", site.push.timeout.clone().map(leak));
    if let Some(trust) = &site.network.trust {
        out.push(("trust", trust.iter().map(|p| path(p)).collect()));
    }
    let binds = site.run.image_binds();
    out.push(("image_bind", binds.iter().map(|p| path(p)).collect()));
    out
}

/// Whether `command` takes the site's value for its argument `id`: the push's timeout is
/// not `learn`'s, which has its own `--timeout`.
fn takes(command: &str, id: &str) -> bool {
    id != "timeout" || command == "push" || command == "prefetch"
}

/// The argument a site key stands for, by its id in the commands that take it.
fn arg_of(section: &str, key: &str) -> Option<&'static str> {
    Some(match (section, key) {
        ("store", "path") => "store",
        ("store", "shared") => "shared_store",
        ("store", "origin") => "origin",
        ("root", "host") => "login",
        ("topology", "file") => "topology",
        ("topology", "cluster") => "cluster",
        ("topology", "group_size") => "group_size",
        ("topology", "links") => "links",
        ("tree", "strategy") => "strategy",
        ("tree", "width") => "width",
        ("tree", "threshold") => "threshold",
        ("tree", "login_copies") => "login_copies",
        ("network", "identity") => "identity",
        ("network", "hosts") => "hosts",
        ("network", "port") => "port",
        ("network", "trust") => "trust",
        ("push", "timeout") => "timeout",
        ("run", "image_binds") => "image_bind",
        _ => return None,
    })
}

/// The subcommand `argv` runs, if any.
fn subcommand<'a>(cmd: &'a clap::Command, argv: &[OsString]) -> Option<&'a clap::Command> {
    argv.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find_map(|a| cmd.find_subcommand(a))
}

/// The name of the subcommand `argv` runs, if any.
pub fn subcommand_name<'a>(cmd: &'a clap::Command, argv: &[OsString]) -> Option<&'a str> {
    subcommand(cmd, argv).map(clap::Command::get_name)
}

/// Whether the command `argv` runs reads the site configuration at all.
pub fn reads_site(cmd: &clap::Command, argv: &[OsString]) -> bool {
    subcommand(cmd, argv).is_some_and(|sc| {
        let name = sc.get_name();
        name == "prefetch" || COMMANDS.contains(&name)
    })
}

/// The site configuration's mistakes that stop the command `argv` runs: a bad value of a
/// key the command uses (it takes the flag the key stands for and the flag is not given;
/// `prefetch` uses every key). Unknown keys stop nothing; everything else is a warning.
pub fn fatal<'a>(
    cmd: &clap::Command,
    argv: &[OsString],
    problems: &'a [manifest::SiteProblem],
) -> Vec<&'a manifest::SiteProblem> {
    let Some(sc) = subcommand(cmd, argv) else {
        return Vec::new();
    };
    let given = |long: &str| {
        argv.iter().filter_map(|a| a.to_str()).any(|a| {
            a.strip_prefix("--")
                .is_some_and(|a| a.split('=').next() == Some(long))
        })
    };
    problems
        .iter()
        .filter(|p| p.is_invalid())
        .filter(|p| {
            if sc.get_name() == "prefetch" {
                return true;
            }
            let Some(id) = p.key.as_deref().and_then(|k| arg_of(&p.section, k)) else {
                // A whole section of the wrong kind: every command that reads the site.
                return COMMANDS.contains(&sc.get_name()) && p.key.is_none();
            };
            if !takes(sc.get_name(), id) {
                return false;
            }
            // The daemon listens on the site's port unless told where.
            let ids: &[&str] = if id == "port" {
                &["port", "listen"]
            } else {
                &[id]
            };
            sc.get_arguments()
                .find(|a| ids.contains(&a.get_id().as_str()))
                .is_some_and(|a| !a.get_long().is_some_and(given))
        })
        .collect()
}

/// Commands that read the site configuration.
const COMMANDS: [&str; 14] = [
    "plan", "push", "health", "prefetch", "daemon", "publish", "verify", "inspect", "mount",
    "doctor", "gc", "learn", "record", "run",
];

/// `cmd` with the site configuration's values as the defaults of the flags they stand for.
pub fn apply(mut cmd: clap::Command, site: &SiteConfig, argv: &[OsString]) -> clap::Command {
    let defaults = defaults(site, argv);
    for name in COMMANDS {
        for (id, values) in &defaults {
            let has = takes(name, id)
                && cmd
                    .find_subcommand(name)
                    .is_some_and(|sc| sc.get_arguments().any(|a| a.get_id() == *id));
            if !has {
                continue;
            }
            let values = values.clone();
            cmd = cmd.mut_subcommand(name, |sc| {
                sc.mut_arg(*id, |a| {
                    // A flag the site gives a value is no longer required: `--store` may
                    // be left out wherever the site names its store.
                    let a = a
                        .required(false)
                        .required_unless_present(clap::builder::Resettable::<clap::Id>::Reset);
                    if values.len() == 1 {
                        a.default_value(values[0])
                    } else {
                        a.default_values(values)
                    }
                })
            });
        }
        if let (Some(port), Some(true)) = (
            site.network.port,
            cmd.find_subcommand(name)
                .map(|sc| name == "daemon" && sc.get_arguments().any(|a| a.get_id() == "listen")),
        ) {
            // The daemon listens on the site's port.
            let listen = leak(format!("0.0.0.0:{port}"));
            cmd = cmd.mut_subcommand(name, |sc| sc.mut_arg("listen", |a| a.default_value(listen)));
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(text: &str) -> SiteConfig {
        SiteConfig::from_toml(text, "test").expect("site")
    }

    /// Issue 32 item 2: the daemon's origin store is the site's `[store] origin`, else its
    /// `[store] shared`; `--origin` wins.
    #[test]
    fn the_daemons_origin_store_comes_from_the_site() {
        use clap::CommandFactory;
        let origin_of = |text: &str, extra: &[&str]| {
            let mut argv: Vec<OsString> = ["teesfs", "daemon"].iter().map(OsString::from).collect();
            argv.extend(extra.iter().map(OsString::from));
            let m = apply(crate::Cli::command(), &site(text), &argv)
                .try_get_matches_from(&argv)
                .expect("parses");
            let (_, sub) = m.subcommand().expect("daemon");
            sub.get_one::<std::path::PathBuf>("origin").cloned()
        };
        let p = std::path::PathBuf::from;
        assert_eq!(origin_of("", &[]), None);
        assert_eq!(
            origin_of("[store]\nshared = \"/gpfs/s\"\n", &[]),
            Some(p("/gpfs/s"))
        );
        let both = "[store]\nshared = \"/gpfs/s\"\norigin = \"/lustre/o\"\n";
        assert_eq!(origin_of(both, &[]), Some(p("/lustre/o")));
        assert_eq!(origin_of(both, &["--origin", "/x"]), Some(p("/x")));
    }

    #[test]
    fn site_values_are_defaults_and_flags_still_win() {
        use clap::CommandFactory;
        let s = site(
            "[root]\nhost = \"login7\"\n[topology]\ncluster = \"cn[1-64]\"\ngroup_size = 8\n\
             [tree]\nwidth = 4\nlogin_copies = 1\n[network]\nport = 9000\n",
        );
        let argv: Vec<OsString> = ["teesfs", "plan", "--nodes", "cn[1-16]"]
            .iter()
            .map(OsString::from)
            .collect();
        let cmd = apply(crate::Cli::command(), &s, &argv);
        let m = cmd.clone().try_get_matches_from(&argv).expect("parses");
        let (_, sub) = m.subcommand().expect("plan");
        assert_eq!(sub.get_one::<usize>("width"), Some(&4));
        assert_eq!(sub.get_one::<usize>("login_copies"), Some(&1));
        assert_eq!(
            sub.get_one::<String>("login").map(String::as_str),
            Some("login7")
        );
        assert_eq!(sub.get_one::<usize>("group_size"), Some(&8));
        let argv2: Vec<OsString> = ["teesfs", "plan", "--nodes", "cn[1-16]", "--width", "2"]
            .iter()
            .map(OsString::from)
            .collect();
        let m = cmd.try_get_matches_from(&argv2).expect("parses");
        assert_eq!(
            m.subcommand().expect("plan").1.get_one::<usize>("width"),
            Some(&2)
        );
        // A topology flag on the command line replaces the site's topology.
        let argv3: Vec<OsString> = ["teesfs", "plan", "--nodes", "cn[1-16]", "--group-size", "4"]
            .iter()
            .map(OsString::from)
            .collect();
        let m = apply(crate::Cli::command(), &s, &argv3)
            .try_get_matches_from(&argv3)
            .expect("parses");
        let sub = m.subcommand().expect("plan").1;
        assert_eq!(sub.get_one::<usize>("group_size"), Some(&4));
        assert_eq!(sub.get_one::<String>("cluster"), None);
        // The daemon listens on the site's port.
        let argv4: Vec<OsString> = ["teesfs", "daemon"].iter().map(OsString::from).collect();
        let m = apply(crate::Cli::command(), &s, &argv4)
            .try_get_matches_from(&argv4)
            .expect("parses");
        let sub = m.subcommand().expect("daemon").1;
        assert_eq!(
            sub.get_one::<std::net::SocketAddr>("listen")
                .map(|a| a.port()),
            Some(9000)
        );
    }

    /// The site's `[push] timeout` is the default of `push --timeout` and
    /// `prefetch --timeout`, and of nothing else (`learn` has a `--timeout` of its own).
    #[test]
    fn the_sites_push_timeout_is_the_default_of_push_and_prefetch_only() {
        use clap::CommandFactory;
        let s = site("[push]\ntimeout = \"90s\"\n");
        let timeout = |args: &[&str]| {
            let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
            let m = apply(crate::Cli::command(), &s, &argv)
                .try_get_matches_from(&argv)
                .expect("parses");
            m.subcommand()
                .expect("a command")
                .1
                .get_one::<std::time::Duration>("timeout")
                .copied()
        };
        let push = [
            "teesfs", "push", "--store", "/s", "--index", "abcd", "--nodes", "n1",
        ];
        assert_eq!(timeout(&push), Some(std::time::Duration::from_secs(90)));
        let mut given = push.to_vec();
        given.extend(["--timeout", "5s"]);
        assert_eq!(timeout(&given), Some(std::time::Duration::from_secs(5)));
        let prefetch = ["teesfs", "prefetch", "manifest.toml"];
        assert_eq!(timeout(&prefetch), Some(std::time::Duration::from_secs(90)));
        let learn = ["teesfs", "learn", "--job", "1", "--nodes", "n1"];
        assert_ne!(timeout(&learn), Some(std::time::Duration::from_secs(90)));
    }
}
