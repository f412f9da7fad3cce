//! Help and man pages that teach (issue 19 item 6): `push --help` groups its flags, the
//! commands people start with have examples, the man pages have FILES, ENVIRONMENT, EXIT
//! STATUS and EXAMPLES, the product's description (not the crate's) heads them, and no help
//! points at a source file.

use crate::util::{Workspace, teesfs_bin};

fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(teesfs_bin())
        .args(args)
        .output()
        .expect("teesfs --help");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn push_help_groups_its_flags_under_headings_and_shows_examples() {
    let text = help(&["push", "--help"]);
    for heading in [
        "Job:",
        "Topology:",
        "Network:",
        "Timing:",
        "Output:",
        "Examples:",
    ] {
        assert!(
            text.lines().any(|l| l == heading),
            "no {heading} in push --help:\n{text}"
        );
    }
    // Each flag under the heading it belongs to.
    let under = |flag: &str| {
        let at = text.find(flag).expect(flag);
        ["Job:", "Topology:", "Network:", "Timing:", "Output:"]
            .into_iter()
            .filter_map(|h| text[..at].rfind(&format!("\n{h}\n")).map(|p| (p, h)))
            .max()
            .map(|(_, h)| h)
    };
    assert_eq!(under("--job <ID>"), Some("Job:"));
    assert_eq!(under("--nodes"), Some("Topology:"));
    assert_eq!(under("--identity"), Some("Network:"));
    assert_eq!(under("--deadline"), Some("Timing:"));
    assert_eq!(under("--format"), Some("Output:"));
}

#[test]
fn help_is_the_products_and_never_points_at_source_files() {
    let top = help(&["--help"]);
    assert!(
        top.starts_with("teesfs gets a software layer"),
        "the about is not the product's: {top}"
    );
    assert!(
        !top.contains("over the node library"),
        "Cargo's description: {top}"
    );
    assert!(
        top.contains("[development]"),
        "sim and lab are not marked: {top}"
    );
    let mut commands = vec![vec!["--help"]];
    for line in top.lines().skip_while(|l| *l != "Commands:").skip(1) {
        if line.is_empty() {
            break;
        }
        // A wrapped description goes on with deeper indentation.
        let Some(name) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) else {
            continue;
        };
        let name = name.split_whitespace().next().unwrap_or_default();
        if name != "help" {
            commands.push(vec![name, "--help"]);
        }
    }
    assert!(commands.len() > 10, "{commands:?}");
    for args in &commands {
        let text = help(args);
        assert!(
            !text.contains("src/"),
            "{args:?} points at a source file:\n{text}"
        );
    }
    for cmd in ["push", "plan", "health", "prefetch", "daemon"] {
        assert!(
            help(&[cmd, "--help"]).contains("Examples:"),
            "{cmd} --help has no examples"
        );
    }
}

#[test]
fn man_pages_have_files_environment_exit_status_and_examples() {
    let ws = Workspace::new();
    let man = ws.path().join("man");
    let out = ws.teesfs(&[
        "generate-docs",
        "--man",
        man.to_str().expect("utf8"),
        "--completions",
        ws.path().join("completions").to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let page = |name: &str| {
        std::fs::read_to_string(man.join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"))
    };
    let pages: Vec<String> = std::fs::read_dir(&man)
        .expect("man dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(pages.len() > 10, "{pages:?}");
    for p in &pages {
        let name = p.strip_suffix(".1").expect("section 1");
        let text = page(name);
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH FILES", ".SH ENVIRONMENT"] {
            assert!(text.contains(section), "{p} has no {section}");
        }
        assert!(
            text.contains(".SH \"EXIT STATUS\""),
            "{p} has no EXIT STATUS"
        );
        assert!(!text.contains("src/"), "{p} points at a source file");
    }
    for name in [
        "teesfs-push",
        "teesfs-plan",
        "teesfs-health",
        "teesfs-prefetch",
        "teesfs-daemon",
    ] {
        let text = page(name);
        assert!(text.contains(".SH EXAMPLES"), "{name}.1 has no EXAMPLES");
        assert!(
            text.contains("teesfs.toml\\fR(5)"),
            "{name}.1 does not point at teesfs.toml(5)"
        );
    }
    let top = page("teesfs");
    assert!(top.contains("teesfs gets a software layer"), "{top}");
    assert!(
        !top.contains("over the node library"),
        "Cargo's description in teesfs.1"
    );
}
