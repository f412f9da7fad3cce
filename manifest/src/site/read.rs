//! Reading one site file ([`SiteConfig::from_toml`], [`SiteConfig::from_toml_lenient`]):
//! every section and its keys, the key-by-key parse that leaves out what is wrong, the
//! checks of values against each other, and the [`SiteProblem`] each mistake becomes,
//! naming the file, the line and the key.

use crate::Error;

use super::SiteConfig;

/// Every section and its keys.
const SECTIONS: [(&str, &[&str]); 9] = [
    ("store", &["path", "shared", "origin"]),
    ("root", &["host"]),
    ("topology", &["file", "cluster", "group_size", "links"]),
    ("tree", &["strategy", "width", "threshold", "login_copies"]),
    ("network", &["identity", "hosts", "port", "trust"]),
    ("reports", &["keep", "max_age"]),
    ("push", &["timeout"]),
    (
        "seeder",
        &["host", "listen", "allow", "logdir", "munge_socket"],
    ),
    ("run", &["image_binds"]),
];

/// The parser's message when `key = value` alone does not parse as its section.
fn one_key_problem(section: &str, key: &str, value: &toml::Value) -> Option<String> {
    let mut fields = toml::Table::new();
    fields.insert(key.to_string(), value.clone());
    let mut one = toml::Table::new();
    one.insert(section.to_string(), toml::Value::Table(fields));
    toml::Value::Table(one)
        .try_into::<SiteConfig>()
        .err()
        .map(|e| e.message().to_string())
}

/// What is wrong with a key of a site file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No such section or key (a typo, or one a newer release knows).
    Unknown,
    /// The value is of the wrong kind or contradicts another key.
    Invalid(String),
}

/// A key of a site file left out, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteProblem {
    /// The file.
    pub origin: String,
    /// Its line, where the key is found in the text.
    pub line: Option<usize>,
    /// The section (`tree`).
    pub section: String,
    /// The key (`width`); `None` for a whole section.
    pub key: Option<String>,
    /// What is wrong.
    pub problem: Problem,
}

impl SiteProblem {
    fn new(text: &str, origin: &str, section: &str, key: Option<&str>, problem: Problem) -> Self {
        Self {
            origin: origin.to_string(),
            line: line_of(text, section, key),
            section: section.to_string(),
            key: key.map(str::to_string),
            problem,
        }
    }

    /// The key as the file writes it: `[tree] width`, or `[daemon]`.
    pub fn key_name(&self) -> String {
        match &self.key {
            Some(k) => format!("[{}] {k}", self.section),
            None => format!("[{}]", self.section),
        }
    }

    /// Whether a bad value (not just an unknown key) makes the key unusable.
    pub fn is_invalid(&self) -> bool {
        matches!(self.problem, Problem::Invalid(_))
    }
}

impl std::fmt::Display for SiteProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(l) = self.line {
            write!(f, ", line {l}")?;
        }
        match &self.problem {
            Problem::Unknown => write!(
                f,
                ": unknown key {}, ignored (a typo, or a key of a newer release; `teesfs config check` lists the known ones)",
                self.key_name()
            ),
            Problem::Invalid(why) => write!(f, ": {} {why}", self.key_name()),
        }
    }
}

/// The line of `[section]`'s `key` in `text` (or of the section's header), 1-based.
fn line_of(text: &str, section: &str, key: Option<&str>) -> Option<usize> {
    let mut in_section = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            in_section = t.trim_start_matches('[').trim_end_matches(']').trim() == section;
            if in_section && key.is_none() {
                return Some(i + 1);
            }
            continue;
        }
        let Some(k) = key else { continue };
        let name = t.split('=').next().unwrap_or("").trim().trim_matches('"');
        if in_section && t.contains('=') && name == k {
            return Some(i + 1);
        }
    }
    None
}

impl SiteConfig {
    /// Parses one file's text and refuses any mistake in it; `origin` (its path) names it
    /// in errors, with the line and the offending key, never quoting other content of the
    /// file.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, Error> {
        let (cfg, problems) = Self::from_toml_lenient(text, origin)?;
        match problems.into_iter().next() {
            Some(p) => Err(Error::SiteConfig(p.to_string())),
            None => Ok(cfg),
        }
    }

    /// Parses one file's text, leaving out what is wrong: every unknown key and every key
    /// whose value is bad or contradicts another is reported as a [`SiteProblem`] and not
    /// set. Only text that is not TOML at all is an error.
    pub fn from_toml_lenient(text: &str, origin: &str) -> Result<(Self, Vec<SiteProblem>), Error> {
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            Error::SiteConfig(format!(
                "{origin}, {}",
                crate::jobspec::toml_error(text, &e)
            ))
        })?;
        let mut problems = Vec::new();
        let mut kept = toml::Table::new();
        for (section, value) in table {
            let Some(&(_, keys)) = SECTIONS.iter().find(|(name, _)| *name == section) else {
                problems.push(SiteProblem::new(
                    text,
                    origin,
                    &section,
                    None,
                    Problem::Unknown,
                ));
                continue;
            };
            let Some(fields) = value.as_table() else {
                let why = Problem::Invalid("must be a table".into());
                problems.push(SiteProblem::new(text, origin, &section, None, why));
                continue;
            };
            let mut good = toml::Table::new();
            for (key, v) in fields {
                let problem = if !keys.contains(&key.as_str()) {
                    Some(Problem::Unknown)
                } else {
                    one_key_problem(&section, key, v).map(Problem::Invalid)
                };
                match problem {
                    Some(p) => {
                        problems.push(SiteProblem::new(text, origin, &section, Some(key), p))
                    }
                    None => {
                        good.insert(key.clone(), v.clone());
                    }
                }
            }
            kept.insert(section, toml::Value::Table(good));
        }
        let mut cfg: SiteConfig =
            toml::Value::Table(kept)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    Error::SiteConfig(format!("{origin}: {}", e.message()))
                })?;
        cfg.check(text, origin, &mut problems);
        Ok((cfg, problems))
    }

    /// Leaves out values that contradict the rest, reporting each.
    fn check(&mut self, text: &str, origin: &str, problems: &mut Vec<SiteProblem>) {
        let mut bad = |section: &str, key: &str, why: &str| {
            let why = Problem::Invalid(why.into());
            problems.push(SiteProblem::new(text, origin, section, Some(key), why));
        };
        if self.tree.width == Some(0) {
            bad("tree", "width", "must be at least 1");
            self.tree.width = None;
        }
        if self.tree.login_copies == Some(0) {
            bad(
                "tree",
                "login_copies",
                "must be at least 1: the login node sends the payload at least once",
            );
            self.tree.login_copies = None;
        }
        if let Some(t) = &self.push.timeout {
            match humantime::parse_duration(t) {
                Ok(d) if !d.is_zero() => {}
                _ => {
                    bad(
                        "push",
                        "timeout",
                        "must be a duration above zero, such as \"30m\" or \"90s\"",
                    );
                    self.push.timeout = None;
                }
            }
        }
        if self.topology.group_size == Some(0) {
            bad("topology", "group_size", "must be at least 1");
            self.topology.group_size = None;
        }
        if self.topology.file.is_some() && self.topology.cluster.is_some() {
            bad(
                "topology",
                "file",
                "and [topology] cluster are alternatives: keep one",
            );
            self.topology.file = None;
            self.topology.cluster = None;
        }
        if self.reports.keep == Some(0) {
            bad(
                "reports",
                "keep",
                "must be at least 1 (the job being pushed is always kept)",
            );
            self.reports.keep = None;
        }
        if let Some(age) = &self.reports.max_age {
            match humantime::parse_duration(age) {
                Ok(d) if !d.is_zero() => {}
                _ => {
                    bad(
                        "reports",
                        "max_age",
                        "must be a duration such as \"30d\" or \"12h\"",
                    );
                    self.reports.max_age = None;
                }
            }
        }
        self.check_seeder(&mut bad);
        if let Some(why) = self.run.check() {
            bad("run", "image_binds", &why);
            self.run.image_binds = None;
        }
        if self.topology.cluster.is_some() && self.topology.group_size.is_none() {
            bad("topology", "cluster", "needs [topology] group_size");
            self.topology.cluster = None;
        }
    }

    /// Leaves out `[seeder]` values that cannot be used, reporting each.
    fn check_seeder(&mut self, bad: &mut impl FnMut(&str, &str, &str)) {
        let s = &mut self.seeder;
        if s.listen
            .as_deref()
            .is_some_and(|l| l.parse::<std::net::SocketAddr>().is_err())
        {
            bad(
                "seeder",
                "listen",
                "must be an address and port, such as \"0.0.0.0:7412\"",
            );
            s.listen = None;
        }
        if s.host
            .as_deref()
            .is_some_and(|h| h.trim().is_empty() || h.contains(char::is_whitespace))
        {
            bad(
                "seeder",
                "host",
                "must be a host name or address, with an optional :port",
            );
            s.host = None;
        }
        if s.allow.as_ref().is_some_and(|a| {
            a.is_empty()
                || a.iter()
                    .any(|u| u.trim().is_empty() || u.contains(char::is_whitespace))
        }) {
            bad(
                "seeder",
                "allow",
                "must list at least one user name or uid (the controller's SlurmUser)",
            );
            s.allow = None;
        }
    }
}
