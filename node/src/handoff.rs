//! The seeder's wire format: how a Slurm controller's prolog hands a job to `teesfs seeder`
//! on a login or data-mover node, and what comes back. Pure: no sockets, no processes.
//!
//! The prolog sends one line, a munge credential (`munge` encodes it as the Slurm user)
//! whose payload is a [`Request`] in JSON; the seeder decodes it with `unmunge`
//! ([`parse_unmunge`] reads what that prints) and answers with [`Reply`] lines: the push's
//! output, then its exit status, or why the request was refused. The munge credential says
//! who sent the request (munge refuses forged, expired and replayed ones); this module never
//! trusts a uid it did not get from `unmunge`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::Error;

/// The seeder's port unless the site's `[seeder] listen` or `host` says otherwise.
pub const DEFAULT_PORT: u16 = 7412;
/// The largest job spec the plugin captures at submit (32 KiB).
pub const MAX_SPEC: usize = 32 * 1024;
/// The longest request line (a munge credential of the largest request, base64 and more).
pub const MAX_LINE: usize = 256 * 1024;
/// The request format's version.
pub const VERSION: u32 = 1;

/// A Slurm job id (decimal, as `$SLURM_JOB_ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SlurmJobId(pub u32);

impl std::fmt::Display for SlurmJobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What the seeder is asked to do for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The PrologSlurmctld: push the job's layer to its nodes (`teesfs prefetch`).
    Prefetch,
    /// The EpilogSlurmctld: learn the job's urgent set from its nodes (`teesfs learn`).
    Learn,
}

/// A job handed to the seeder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// [`VERSION`].
    pub version: u32,
    /// What to do.
    pub kind: Kind,
    /// The Slurm job.
    pub job: SlurmJobId,
    /// The job's nodes, a hostlist (`$SLURM_JOB_NODELIST`).
    pub nodes: String,
    /// The job's owner (`$SLURM_JOB_UID`).
    pub uid: u32,
    /// The spec's absolute path at submit: relative paths in it start at its directory.
    pub spec_path: PathBuf,
    /// The spec's content as the plugin read it at submit, as the user; `None` for a job
    /// that names its spec in its comment (the seeder then reads the file).
    pub spec_text: Option<String>,
}

fn bad(part: &'static str, problem: impl Into<String>) -> Error {
    Error::Handoff {
        part,
        problem: problem.into(),
    }
}

impl Request {
    /// The request as the munge payload carries it.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A request from a munge payload, checked: its version, a spec within [`MAX_SPEC`], an
    /// absolute spec path and a node list.
    pub fn decode(payload: &[u8]) -> Result<Request, Error> {
        let r: Request = serde_json::from_slice(payload).map_err(|e| {
            bad(
                "the request",
                format!("{e}; the prolog and the seeder must run the same teesfs release"),
            )
        })?;
        if r.version != VERSION {
            return Err(bad(
                "the request's version",
                format!(
                    "{} (this seeder reads {VERSION}); upgrade teesfs on the controller and the seeder together",
                    r.version
                ),
            ));
        }
        r.check()?;
        Ok(r)
    }

    /// The checks [`Request::decode`] makes, also made before sending.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(t) = &self.spec_text
            && t.len() > MAX_SPEC
        {
            return Err(bad(
                "the request's spec_text",
                format!(
                    "{} bytes; a job spec may be at most {MAX_SPEC} bytes",
                    t.len()
                ),
            ));
        }
        if !self.spec_path.is_absolute() {
            return Err(bad(
                "the request's spec_path",
                format!("{} is not absolute", self.spec_path.display()),
            ));
        }
        if self.nodes.trim().is_empty() || self.nodes.contains(char::is_whitespace) {
            return Err(bad(
                "the request's nodes",
                format!("{:?} is not a hostlist", self.nodes),
            ));
        }
        Ok(())
    }
}

/// One line from the seeder to the prolog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A line the push printed.
    Line(String),
    /// The push ended with this exit status.
    Exit(i32),
    /// The seeder refused the request; why, and what to do.
    Refused(String),
    /// The push failed because of this node: the prolog drains it with this reason (sent
    /// before [`Reply::Exit`]).
    Drain {
        /// The node's host name.
        host: String,
        /// Slurm's drain reason (`teesfs: login -> n05: no daemon (connection refused)`).
        reason: String,
    },
}

impl Reply {
    /// The reply as one line, newline included (newlines inside become spaces).
    pub fn encode(&self) -> String {
        let flat = |s: &str| s.replace(['\n', '\r'], " ");
        match self {
            Reply::Line(s) => format!("line {}\n", flat(s)),
            Reply::Exit(c) => format!("exit {c}\n"),
            Reply::Refused(s) => format!("refused {}\n", flat(s)),
            Reply::Drain { host, reason } => {
                format!("drain {} {}\n", flat(host).replace(' ', ""), flat(reason))
            }
        }
    }

    /// A reply from one line (its newline removed or not).
    pub fn decode(line: &str) -> Result<Reply, Error> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "line" => Ok(Reply::Line(rest.to_string())),
            "refused" => Ok(Reply::Refused(rest.to_string())),
            "drain" => match rest.split_once(' ') {
                Some((host, reason)) if !host.is_empty() => Ok(Reply::Drain {
                    host: host.to_string(),
                    reason: reason.to_string(),
                }),
                _ => Err(bad(
                    "the seeder's drain line",
                    format!("{rest:?} is not a host and a reason"),
                )),
            },
            "exit" => rest.parse().map(Reply::Exit).map_err(|_| {
                bad(
                    "the seeder's exit line",
                    format!("{rest:?} is not a status"),
                )
            }),
            _ => Err(bad(
                "the seeder's reply",
                format!(
                    "{:?} is not a teesfs seeder line; is a teesfs seeder of the same release listening there?",
                    line.chars().take(40).collect::<String>()
                ),
            )),
        }
    }
}

/// What `unmunge` says about a good credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmunged {
    /// The uid that encoded it.
    pub uid: u32,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// The number in an `unmunge` metadata value: `64030`, or the one in parentheses
/// (`slurm (64030)`, `Success (0)`).
fn number_in(value: &str) -> Option<u32> {
    let v = value.trim();
    let inner = match (v.rfind('('), v.strip_suffix(')')) {
        (Some(i), Some(head)) => &head[i + 1..],
        _ => v,
    };
    inner.trim().parse().ok()
}

/// Reads `unmunge`'s output (metadata lines, an empty line, the payload). Only a `STATUS`
/// of 0 is a good credential; `unmunge` also prints the payload of a replayed or expired
/// one (its status then names why), so the caller must check its exit status as well.
pub fn parse_unmunge(out: &[u8]) -> Result<Unmunged, Error> {
    let split = out
        .windows(2)
        .position(|w| w == b"\n\n")
        .ok_or_else(|| bad("unmunge's output", "no empty line after its metadata"))?;
    let meta = String::from_utf8_lossy(&out[..split]);
    let field = |key: &str| {
        meta.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let status = field("STATUS").ok_or_else(|| bad("unmunge's STATUS", "missing"))?;
    if number_in(&status) != Some(0) {
        let why = status
            .rsplit_once(" (")
            .map_or(status.as_str(), |(text, _)| text);
        return Err(bad("the credential", why.to_string()));
    }
    let uid = field("UID")
        .as_deref()
        .and_then(number_in)
        .ok_or_else(|| bad("unmunge's UID", "missing or not a number"))?;
    Ok(Unmunged {
        uid,
        payload: out[split + 2..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            version: VERSION,
            kind: Kind::Prefetch,
            job: SlurmJobId(4242),
            nodes: "n[01-32]".into(),
            uid: 1001,
            spec_path: "/home/alice/app/manifest.toml".into(),
            spec_text: Some("[layer]\nindex = \"3a6a\"\n".into()),
        }
    }

    #[test]
    fn a_request_round_trips_and_names_its_kind_in_lowercase() {
        let r = request();
        let bytes = r.encode();
        assert!(String::from_utf8_lossy(&bytes).contains("\"kind\":\"prefetch\""));
        assert!(String::from_utf8_lossy(&bytes).contains("\"job\":4242"));
        assert_eq!(Request::decode(&bytes).expect("decodes"), r);
        let learn = Request {
            kind: Kind::Learn,
            spec_text: None,
            ..r
        };
        assert_eq!(Request::decode(&learn.encode()).expect("decodes"), learn);
    }

    #[test]
    fn a_bad_request_is_refused_naming_the_part() {
        let mut big = request();
        big.spec_text = Some("#".repeat(MAX_SPEC + 1));
        let e = Request::decode(&big.encode()).expect_err("too big");
        assert!(
            e.to_string().contains("spec_text") && e.to_string().contains("32768"),
            "{e}"
        );
        let mut rel = request();
        rel.spec_path = "manifest.toml".into();
        let e = Request::decode(&rel.encode()).expect_err("relative");
        assert!(e.to_string().contains("spec_path"), "{e}");
        let mut nodes = request();
        nodes.nodes = "n01 n02".into();
        let e = Request::decode(&nodes.encode()).expect_err("nodes");
        assert!(e.to_string().contains("nodes"), "{e}");
        let mut v = request();
        v.version = 2;
        let e = Request::decode(&v.encode()).expect_err("version");
        assert!(
            e.to_string().contains("version") && e.to_string().contains("upgrade"),
            "{e}"
        );
        let extra = br#"{"version":1,"kind":"prefetch","job":1,"nodes":"n1","uid":0,"spec_path":"/s","spec_text":null,"root":true}"#;
        let e = Request::decode(extra).expect_err("unknown field");
        assert!(e.to_string().contains("root"), "{e}");
        let e = Request::decode(b"not json").expect_err("garbage");
        assert!(e.to_string().starts_with("the request:"), "{e}");
    }

    #[test]
    fn replies_round_trip_one_line_each() {
        for r in [
            Reply::Line("urgent set on all nodes: 1.2 s".into()),
            Reply::Line(String::new()),
            Reply::Exit(0),
            Reply::Exit(1),
            Reply::Refused("uid 65534 is not in [seeder] allow".into()),
            Reply::Drain {
                host: "n05".into(),
                reason: "teesfs: login -> n05: no daemon (connection refused)".into(),
            },
        ] {
            let line = r.encode();
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert_eq!(Reply::decode(&line).expect("decodes"), r);
        }
        assert_eq!(
            Reply::Line("a\nb".into()).encode(),
            "line a b\n",
            "a newline inside cannot end the line early"
        );
        let e = Reply::decode("HTTP/1.1 400 Bad Request").expect_err("not a seeder");
        assert!(e.to_string().contains("seeder"), "{e}");
        assert!(Reply::decode("exit soon").is_err());
    }

    #[test]
    fn unmunge_output_gives_the_uid_and_payload_only_for_a_good_credential() {
        let good = b"STATUS:          Success (0)\nENCODE_HOST:     ctl (10.77.0.3)\n\
                     TTL:             300\nUID:             slurm (64030)\n\
                     GID:             slurm (64030)\nLENGTH:          7\n\n{\"a\":1}";
        let u = parse_unmunge(good).expect("good");
        assert_eq!(u.uid, 64030);
        assert_eq!(u.payload, b"{\"a\":1}");
        let numeric = b"STATUS: 0\nUID: 0\n\nx";
        assert_eq!(parse_unmunge(numeric).expect("numeric").uid, 0);
        // unmunge prints a replayed credential's payload too, and says why in STATUS only.
        let replayed =
            String::from_utf8_lossy(good).replace("Success (0)", "Replayed credential (17)");
        let e = parse_unmunge(replayed.as_bytes()).expect_err("replayed");
        assert_eq!(e.to_string(), "the credential: Replayed credential");
        let no_uid = String::from_utf8_lossy(good).replace("slurm (64030)\nGID", "slurm\nGID");
        assert!(
            parse_unmunge(no_uid.as_bytes()).is_err(),
            "a UID without its number"
        );
        assert!(
            parse_unmunge(b"STATUS: 0\nUID: 0\n").is_err(),
            "no payload separator"
        );
    }
}
