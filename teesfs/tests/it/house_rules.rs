//! The house rules (DESIGN.md, "How the code should feel"; issue 31) as checks, so they
//! cannot slip again: no non-test source file over [`MAX_FILE_LINES`] lines, no crate over
//! [`MAX_CRATE_PERCENT`]% of the shipped lines, every workspace crate classified as shipped
//! or not, the `teesfs` package without default features (a plain `cargo build` or `cargo
//! install` links neither the lab nor fault injection), and these tests run with the lab.
//!
//! Counting and judging are pure ([`judge`] over file texts), so the unit tests below catch
//! a regression in the judge itself; [`the_workspace_keeps_the_house_rules`] only reads the
//! workspace and hands it over.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates (by folder) whose code ships: the `teesfs` binary built without the lab (no
/// default features, no modules gated on [`LAB_FEATURES`]), the libraries it links, and
/// the SPANK plugin. The one definition of "shipped"; the README's crate table says it.
const SHIPPED: &[&str] = &[
    "manifest",
    "peertree",
    "seeder",
    "runenv",
    "keeper",
    "ociimage",
    "pushreport",
    "node",
    "teesfs",
    "spank",
];

/// The crates (by folder) that do not ship: the emulated cluster with its experiments, and
/// the fuzz targets (their own workspace).
const NOT_SHIPPED: &[&str] = &["lab", "fuzz"];

/// Features the shipped binary is built without: modules declared under
/// `#[cfg(feature = ...)]` of one of these are not shipped code.
const LAB_FEATURES: &[&str] = &["lab", "fault-injection"];

/// The floors of the crates (by folder), as the README's crate table says them: a crate
/// depends (in `[dependencies]`) only on crates of a lower floor, so the pure crates stay
/// at the bottom and nothing below the node library reaches up into it.
const FLOORS: &[(&str, u8)] = &[
    ("manifest", 0),
    ("peertree", 0),
    ("runenv", 0),
    ("keeper", 0),
    ("pushreport", 1),
    ("seeder", 1),
    ("ociimage", 1),
    ("spank", 1),
    ("node", 2),
    ("lab", 3),
    ("teesfs", 4),
];

/// The longest a non-test source file may be before it is split by concern.
const MAX_FILE_LINES: usize = 800;

/// The largest share of the shipped lines one crate may hold.
const MAX_CRATE_PERCENT: usize = 35;

/// One Rust source file of a crate, as read from the workspace.
struct Source {
    /// The crate's folder (`node`).
    krate: String,
    /// The path from the workspace root, `/`-separated (`node/src/fs/data.rs`).
    path: String,
    text: String,
}

/// What the rules make of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Shipped (if its crate is) and held to the length limit.
    Code,
    /// Compiled only with a lab feature: held to the length limit, never shipped.
    LabOnly,
    /// Under `tests/`, named `tests.rs` or `*_tests.rs`, or declared under `#[cfg(test)]`.
    Test,
}

/// The workspace as the rules see it, apart from its sources.
struct Workspace {
    /// The folders of the workspace's crates (its members, and `fuzz`).
    crates: Vec<String>,
    /// The `teesfs` binary package's default features.
    teesfs_default: Vec<String>,
    /// Each crate's (by folder) normal dependencies on the workspace's crates (by folder).
    deps: BTreeMap<String, Vec<String>>,
}

/// One broken rule, said the way the failure message prints it.
#[derive(Debug, PartialEq, Eq)]
enum Breach {
    LongFile {
        path: String,
        lines: usize,
    },
    BigCrate {
        krate: String,
        lines: usize,
        total: usize,
    },
    Unclassified {
        krate: String,
    },
    NoSuchCrate {
        krate: String,
    },
    DefaultFeatures {
        features: Vec<String>,
    },
    Floor {
        krate: String,
        dep: String,
    },
    NoFloor {
        krate: String,
    },
    StringError {
        path: String,
        line: usize,
    },
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LongFile { path, lines } => write!(
                f,
                "{path}: {lines} lines, over {MAX_FILE_LINES}: split it by concern"
            ),
            Self::BigCrate {
                krate,
                lines,
                total,
            } => write!(
                f,
                "crate {krate}: {lines} of {total} shipped lines ({:.1}%), over {MAX_CRATE_PERCENT}%",
                100.0 * *lines as f64 / *total as f64
            ),
            Self::Unclassified { krate } => write!(
                f,
                "crate {krate} is in neither SHIPPED nor NOT_SHIPPED (teesfs/tests/it/house_rules.rs): \
                 classify it"
            ),
            Self::NoSuchCrate { krate } => write!(
                f,
                "crate {krate} is classified in teesfs/tests/it/house_rules.rs but the workspace has \
                 no such crate"
            ),
            Self::DefaultFeatures { features } => write!(
                f,
                "teesfs/Cargo.toml: the teesfs package has default features {features:?}: a plain \
                 `cargo build` or `cargo install` must not link the lab"
            ),
            Self::Floor { krate, dep } => write!(
                f,
                "crate {krate} depends on {dep}, which is not on a lower floor (FLOORS in \
                 teesfs/tests/it/house_rules.rs, the README's crate table): move the shared part \
                 down instead"
            ),
            Self::StringError { path, line } => write!(
                f,
                "{path}:{line}: a Result whose error is a String: give the error a type (the \
                 crate's error enum, or anyhow in the binary)"
            ),
            Self::NoFloor { krate } => write!(
                f,
                "crate {krate} has no floor in FLOORS (teesfs/tests/it/house_rules.rs): give it \
                 one, and a line in the README's crate table"
            ),
        }
    }
}

/// Every rule the workspace breaks, in a stable order.
fn judge(ws: &Workspace, sources: &[Source]) -> Vec<Breach> {
    let kinds = kinds(sources);
    let mut breaches = classification(ws);
    if !ws.teesfs_default.is_empty() {
        breaches.push(Breach::DefaultFeatures {
            features: ws.teesfs_default.clone(),
        });
    }
    for s in sources {
        let lines = s.text.lines().count();
        if kinds[&s.path] != Kind::Test && lines > MAX_FILE_LINES {
            breaches.push(Breach::LongFile {
                path: s.path.clone(),
                lines,
            });
        }
    }
    breaches.extend(string_errors(sources, &kinds));
    breaches.extend(big_crates(sources, &kinds));
    breaches.extend(floors(ws));
    breaches
}

/// Every line of shipped or lab code that declares a `Result<_, String>`.
fn string_errors(sources: &[Source], kinds: &BTreeMap<String, Kind>) -> Vec<Breach> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| kinds[&s.path] != Kind::Test) {
        let mut in_tests = false;
        for (i, l) in s.text.lines().enumerate() {
            // A `#[cfg(test)]` module at the end of a file is a test.
            in_tests |= l.trim() == "#[cfg(test)]";
            let code = l.split("//").next().unwrap_or("");
            if !in_tests && is_string_error(code) {
                out.push(Breach::StringError {
                    path: s.path.clone(),
                    line: i + 1,
                });
            }
        }
    }
    out
}

/// Whether a line of code names a `Result` type whose error is `String`.
fn is_string_error(code: &str) -> bool {
    code.match_indices("Result<").any(|(at, _)| {
        let rest = &code[at + "Result<".len()..];
        let mut depth = 1;
        for (i, ch) in rest.char_indices() {
            match ch {
                '<' | '(' => depth += 1,
                '>' | ')' if depth == 1 => {
                    return rest[..i].trim_end().ends_with(", String");
                }
                '>' | ')' => depth -= 1,
                _ => {}
            }
        }
        false
    })
}

/// The dependencies that do not go down a floor, and the crates with no floor.
fn floors(ws: &Workspace) -> Vec<Breach> {
    let floor = |k: &str| FLOORS.iter().find(|(c, _)| *c == k).map(|&(_, f)| f);
    let mut out = Vec::new();
    for (krate, deps) in &ws.deps {
        let Some(mine) = floor(krate) else {
            out.push(Breach::NoFloor {
                krate: krate.clone(),
            });
            continue;
        };
        for dep in deps {
            if floor(dep).is_none_or(|theirs| theirs >= mine) {
                out.push(Breach::Floor {
                    krate: krate.clone(),
                    dep: dep.clone(),
                });
            }
        }
    }
    out
}

/// The crates of the workspace in neither list, and the listed ones it does not have.
fn classification(ws: &Workspace) -> Vec<Breach> {
    let listed: BTreeSet<&str> = SHIPPED.iter().chain(NOT_SHIPPED).copied().collect();
    let found: BTreeSet<&str> = ws.crates.iter().map(String::as_str).collect();
    let unclassified = found.difference(&listed).map(|k| Breach::Unclassified {
        krate: k.to_string(),
    });
    let missing = listed.difference(&found).map(|k| Breach::NoSuchCrate {
        krate: k.to_string(),
    });
    unclassified.chain(missing).collect()
}

/// The shipped crates holding more than their share of the shipped lines.
fn big_crates(sources: &[Source], kinds: &BTreeMap<String, Kind>) -> Vec<Breach> {
    let mut per_crate: BTreeMap<&str, usize> = BTreeMap::new();
    for s in sources {
        let in_src = s.path.starts_with(&format!("{}/src/", s.krate));
        if SHIPPED.contains(&s.krate.as_str()) && in_src && kinds[&s.path] == Kind::Code {
            *per_crate.entry(&s.krate).or_default() += shipped_lines(&s.text);
        }
    }
    let total: usize = per_crate.values().sum();
    per_crate
        .into_iter()
        .filter(|&(_, lines)| lines * 100 > total * MAX_CRATE_PERCENT)
        .map(|(krate, lines)| Breach::BigCrate {
            krate: krate.to_string(),
            lines,
            total,
        })
        .collect()
}

/// Lines of a file outside its inline `#[cfg(test)]` modules (as rustfmt lays them out:
/// the attribute, `mod name {` and the closing `}` at the file's top level).
fn shipped_lines(text: &str) -> usize {
    let mut lines = text.lines().peekable();
    let mut count = 0;
    while let Some(line) = lines.next() {
        let opens_test_mod = line == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.contains("mod ") && next.ends_with('{'));
        if opens_test_mod {
            lines.by_ref().find(|l| *l == "}");
        } else {
            count += 1;
        }
    }
    count
}

/// Each file's kind: by its name, then by the `#[cfg(...)]` on the `mod` declaring it (or a
/// module it is inside of).
fn kinds(sources: &[Source]) -> BTreeMap<String, Kind> {
    let mut gated: Vec<(String, Kind)> = Vec::new();
    for s in sources {
        gated.extend(gated_modules(&s.path, &s.text));
    }
    sources
        .iter()
        .map(|s| {
            let by_name = is_test_by_name(&s.krate, &s.path).then_some(Kind::Test);
            let by_gate = gated
                .iter()
                .filter(|(module, _)| s.path == *module || s.path.starts_with(&dir_of(module)))
                .map(|&(_, kind)| kind)
                .max_by_key(|&k| k == Kind::Test);
            (s.path.clone(), by_name.or(by_gate).unwrap_or(Kind::Code))
        })
        .collect()
}

/// Whether a file is a test by where it is or its name.
fn is_test_by_name(krate: &str, path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.starts_with(&format!("{krate}/tests/"))
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
}

/// The module directory of a module file: `a/b.rs` and `a/b/mod.rs` own `a/b/`.
fn dir_of(module: &str) -> String {
    match module.strip_suffix("/mod.rs") {
        Some(dir) => format!("{dir}/"),
        None => format!("{}/", module.trim_end_matches(".rs")),
    }
}

/// The files of the `mod name;` declarations in the file at `path` that carry
/// `#[cfg(test)]` or `#[cfg(feature = ...)]` of a lab feature, with what that makes them.
fn gated_modules(path: &str, text: &str) -> Vec<(String, Kind)> {
    let mut found = Vec::new();
    let mut attrs: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[") {
            attrs.push(line);
            continue;
        }
        let kind = if attrs.contains(&"#[cfg(test)]") {
            Some(Kind::Test)
        } else {
            LAB_FEATURES
                .iter()
                .any(|f| attrs.contains(&format!("#[cfg(feature = \"{f}\")]").as_str()))
                .then_some(Kind::LabOnly)
        };
        let explicit = attrs.iter().copied().find_map(|a| {
            a.strip_prefix("#[path = \"")
                .and_then(|p| p.strip_suffix("\"]"))
        });
        attrs.clear();
        let (Some(kind), Some(name)) = (kind, declared_module(line)) else {
            continue;
        };
        found.extend(
            module_files(path, name, explicit)
                .into_iter()
                .map(|f| (f, kind)),
        );
    }
    found
}

/// The name in a `mod name;` declaration (of any visibility).
fn declared_module(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("pub ").or_else(|| {
        line.strip_prefix("pub(")
            .and_then(|r| r.split_once(") ").map(|(_, r)| r))
    });
    rest.unwrap_or(line).strip_prefix("mod ")?.strip_suffix(';')
}

/// Where the module `name`, declared in the file at `path`, may live.
fn module_files(path: &str, name: &str, explicit: Option<&str>) -> Vec<String> {
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    if let Some(p) = explicit {
        return vec![format!("{dir}/{p}")];
    }
    let owner = if matches!(file, "mod.rs" | "lib.rs" | "main.rs") {
        dir.to_string()
    } else {
        format!("{dir}/{}", file.trim_end_matches(".rs"))
    };
    vec![
        format!("{owner}/{name}.rs"),
        format!("{owner}/{name}/mod.rs"),
    ]
}

/// The workspace's root (this package is one of its members).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the teesfs package sits in the workspace")
        .to_path_buf()
}

fn read_toml(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn strings(v: Option<&toml::Value>) -> Vec<String> {
    v.and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The workspace's crates (its members, and the fuzz targets' own workspace beside them)
/// and the `teesfs` package's default features.
fn read_workspace(root: &Path) -> Workspace {
    let top = read_toml(&root.join("Cargo.toml"));
    let mut crates = strings(top.get("workspace").and_then(|w| w.get("members")));
    if root.join("fuzz/Cargo.toml").is_file() {
        crates.push("fuzz".into());
    }
    let teesfs = read_toml(&root.join("teesfs/Cargo.toml"));
    Workspace {
        deps: read_deps(root, &top, &crates),
        crates,
        teesfs_default: strings(teesfs.get("features").and_then(|f| f.get("default"))),
    }
}

/// Each member's `[dependencies]` on the workspace's own crates, named by folder: a
/// dependency is the workspace's when `[workspace.dependencies]` gives it a path.
fn read_deps(root: &Path, top: &toml::Table, crates: &[String]) -> BTreeMap<String, Vec<String>> {
    let ws_deps = top
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(toml::Value::as_table);
    let folder_of = |name: &str| {
        let path = ws_deps?.get(name)?.get("path")?.as_str()?;
        Some(path.trim_end_matches('/').to_string())
    };
    let mut out = BTreeMap::new();
    for krate in crates.iter().filter(|k| *k != "fuzz") {
        let manifest = read_toml(&root.join(krate).join("Cargo.toml"));
        let deps = manifest.get("dependencies").and_then(toml::Value::as_table);
        let on: Vec<String> = deps
            .into_iter()
            .flat_map(|t| t.keys())
            .filter_map(|name| folder_of(name))
            .collect();
        out.insert(krate.clone(), on);
    }
    out
}

/// Every `.rs` file of the crate in `root/krate` (build outputs left out).
fn read_sources(root: &Path, krate: &str) -> Vec<Source> {
    let mut out = Vec::new();
    let walk = walkdir::WalkDir::new(root.join(krate))
        .into_iter()
        .filter_entry(|e| {
            e.file_name() != "target" && !e.file_name().to_string_lossy().starts_with('.')
        });
    for entry in walk {
        let entry = entry.expect("walking the workspace");
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "rs") && entry.file_type().is_file() {
            let rel = path.strip_prefix(root).expect("under the root");
            out.push(Source {
                krate: krate.to_string(),
                path: rel.to_string_lossy().into_owned(),
                text: std::fs::read_to_string(path).expect("a source file is UTF-8"),
            });
        }
    }
    out
}

#[test]
fn the_workspace_keeps_the_house_rules() {
    let root = root();
    let ws = read_workspace(&root);
    let sources: Vec<Source> = ws
        .crates
        .iter()
        .flat_map(|k| read_sources(&root, k))
        .collect();
    assert!(
        sources
            .iter()
            .any(|s| s.path == "teesfs/tests/it/house_rules.rs"),
        "the walk found the workspace's sources"
    );
    assert!(
        ws.deps
            .get("node")
            .is_some_and(|d| d.iter().any(|k| k == "manifest")),
        "the dependencies were read: {:?}",
        ws.deps
    );
    let breaches = judge(&ws, &sources);
    let said: Vec<String> = breaches.iter().map(ToString::to_string).collect();
    assert!(
        breaches.is_empty(),
        "the house rules are broken:\n{}",
        said.join("\n")
    );
}

/// The lab's tests run in this binary and drive the `teesfs` built beside it, which has the
/// `lab` subcommands and fault injection only with the feature: without it they would fail,
/// and the binary's own lab tests would not even be compiled.
#[test]
fn the_tests_run_with_the_lab() {
    let out = std::process::Command::new(crate::util::teesfs_bin())
        .args(["lab", "--help"])
        .output()
        .expect("teesfs runs");
    assert!(
        out.status.success(),
        "the teesfs under test has no `lab`: run the tests with the lab, `cargo test -p teesfs \
         --features lab` (scripts/test.sh does): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_result_with_a_string_error_is_named_outside_tests() {
    assert!(is_string_error("fn f() -> Result<(), String> {"));
    assert!(is_string_error("    pub stat: Result<(u32, u32), String>,"));
    assert!(is_string_error(
        "fn g() -> std::result::Result<Vec<u8>, String>;"
    ));
    assert!(!is_string_error("fn f() -> Result<String, Error> {"));
    assert!(!is_string_error("fn f() -> Result<(String, u8), Error> {"));
    assert!(!is_string_error("fn f() -> anyhow::Result<String> {"));
    let code = "fn f() -> Result<u8, String> {\n    Ok(1)\n}\n";
    let tested = format!("fn ok() {{}}\n#[cfg(test)]\nmod tests {{\n{code}}}\n");
    let sources = vec![
        src("node", "node/src/a.rs", code.to_string()),
        src("node", "node/src/b.rs", tested),
    ];
    let kinds = kinds(&sources);
    let said: Vec<String> = string_errors(&sources, &kinds)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("node/src/a.rs:1: a Result whose error is a String"));
}

fn src(krate: &str, path: &str, text: String) -> Source {
    Source {
        krate: krate.into(),
        path: path.into(),
        text,
    }
}

fn n_lines(n: usize) -> String {
    "x\n".repeat(n)
}

fn classified() -> Workspace {
    Workspace {
        crates: SHIPPED
            .iter()
            .chain(NOT_SHIPPED)
            .map(|k| k.to_string())
            .collect(),
        teesfs_default: Vec::new(),
        deps: FLOORS
            .iter()
            .map(|(k, _)| (k.to_string(), Vec::new()))
            .collect(),
    }
}

#[test]
fn a_file_over_the_limit_is_named_unless_it_is_a_test() {
    let sources = [
        src("node", "node/src/long.rs", n_lines(801)),
        src("node", "node/src/full.rs", n_lines(800)),
        src("node", "node/src/tests.rs", n_lines(900)),
        src("node", "node/src/fs/data_tests.rs", n_lines(900)),
        src("node", "node/tests/it.rs", n_lines(900)),
        src("lab", "lab/src/slurm.rs", n_lines(900)),
        src(
            "node",
            "node/src/lib.rs",
            "#[cfg(test)]\n#[path = \"t.rs\"]\nmod t;\n".into(),
        ),
        src("node", "node/src/t.rs", n_lines(900)),
    ];
    let long: Vec<String> = judge(&classified(), &sources)
        .iter()
        .filter(|b| matches!(b, Breach::LongFile { .. }))
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        long,
        [
            "node/src/long.rs: 801 lines, over 800: split it by concern",
            "lab/src/slurm.rs: 900 lines, over 800: split it by concern",
        ]
    );
}

/// Shipped crates of 31 + 32 + 2 lines beside `node`'s `node_lines` (and its tests), with a
/// large lab and lab-only modules of the binary, which count for nothing.
fn tree(node_lines: usize) -> Vec<Source> {
    let with_tests = format!(
        "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
        n_lines(node_lines),
        n_lines(500)
    );
    let gated = "#[cfg(feature = \"lab\")]\npub mod lab;\n";
    vec![
        src("node", "node/src/lib.rs", with_tests),
        src("node", "node/benches/b.rs", n_lines(500)),
        src("manifest", "manifest/src/lib.rs", n_lines(31)),
        src("peertree", "peertree/src/lib.rs", n_lines(32)),
        src("lab", "lab/src/lib.rs", n_lines(500)),
        src("teesfs", "teesfs/src/cmd/mod.rs", gated.into()),
        src("teesfs", "teesfs/src/cmd/lab.rs", n_lines(300)),
        src("teesfs", "teesfs/src/cmd/lab/bench.rs", n_lines(300)),
    ]
}

#[test]
fn a_crates_share_counts_shipped_lines_only() {
    assert_eq!(
        judge(&classified(), &tree(35)),
        Vec::<Breach>::new(),
        "35 of 100 lines is not over"
    );
    assert_eq!(
        judge(&classified(), &tree(36)),
        [Breach::BigCrate {
            krate: "node".into(),
            lines: 36,
            total: 101
        }]
    );
}

#[test]
fn an_unclassified_crate_and_default_features_are_breaches() {
    let mut ws = classified();
    ws.crates.retain(|k| k != "fuzz");
    ws.crates.push("newcrate".into());
    ws.teesfs_default = vec!["lab".into()];
    let said: Vec<String> = judge(&ws, &[]).iter().map(ToString::to_string).collect();
    assert_eq!(said.len(), 3, "{said:#?}");
    assert!(said[0].starts_with("crate newcrate is in neither SHIPPED nor NOT_SHIPPED"));
    assert!(said[1].starts_with("crate fuzz is classified"));
    assert!(said[2].contains("default features [\"lab\"]"));
}

#[test]
fn a_dependency_that_does_not_go_down_a_floor_is_named() {
    let mut ws = classified();
    ws.deps
        .insert("node".into(), vec!["manifest".into(), "pushreport".into()]);
    assert_eq!(
        judge(&ws, &[]),
        Vec::<Breach>::new(),
        "node may use lower floors"
    );
    ws.deps.insert("peertree".into(), vec!["manifest".into()]);
    ws.deps.insert("seeder".into(), vec!["node".into()]);
    ws.deps.insert("newcrate".into(), Vec::new());
    let floors: Vec<Breach> = judge(&ws, &[])
        .into_iter()
        .filter(|b| matches!(b, Breach::Floor { .. } | Breach::NoFloor { .. }))
        .collect();
    assert_eq!(
        floors,
        [
            Breach::NoFloor {
                krate: "newcrate".into()
            },
            Breach::Floor {
                krate: "peertree".into(),
                dep: "manifest".into()
            },
            Breach::Floor {
                krate: "seeder".into(),
                dep: "node".into()
            },
        ]
    );
}
