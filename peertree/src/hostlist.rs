//! Slurm hostlist expressions: `cn[0001-0128,0130],login1` <-> a list of host names.
//!
//! Parsing follows Slurm: a bracket holds comma-separated numbers or `lo-hi` ranges; the
//! zero padding of a range is the digit count of its low bound (`n[08-10]` is `n08,n09,n10`,
//! `n[8-10]` is `n8,n9,n10`); several brackets in one name expand as a product, leftmost
//! outermost (`r[1-2]n[1-2]` is `r1n1,r1n2,r2n1,r2n2`). Unlike `scontrol show hostnames`
//! the result is de-duplicated, keeping each host's first position, because a job never
//! holds a node twice. Formatting compresses the trailing number of each name into ranges,
//! keeps the input order (it never sorts), and only merges a host into a range when the
//! range would print it back identically, so `expand(&compress(&hosts)) == hosts` for any
//! de-duplicated list of names that contain no `[`, `]`, `,` or whitespace.
//!
//! This module does no I/O; reading `$SLURM_JOB_NODELIST` is the caller's business.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::error::{Error, Result};

/// The most hosts one expression may expand to; more is almost certainly a typo.
pub const MAX_HOSTS: usize = 1 << 22;

/// The most bytes of host names one expression may expand to, checked before anything is
/// allocated: a long prefix times a large range (`<3,000 chars>[1-4000000]` wanted 12 GB)
/// is refused however few hosts it names.
pub const MAX_BYTES: usize = 64 << 20;

/// Numbers longer than this cannot be held in a `u64` without risk, and no cluster names
/// nodes with them.
const MAX_DIGITS: usize = 18;

/// Expands a hostlist expression into host names, de-duplicated, in order of first mention.
///
/// Top-level items are separated by commas or whitespace; empty items are skipped, so
/// `"a,,b,"` is `a,b`. Errors carry the byte position of the problem.
pub fn expand(expr: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for (start, item) in split_top(expr)? {
        bytes = bytes.saturating_add(expanded_bytes(expr, start, item)?);
        if bytes > MAX_BYTES {
            return Err(err(
                expr,
                start,
                format!("expands to more than {} MiB of host names", MAX_BYTES >> 20),
            ));
        }
        expand_item(expr, start, item, &mut out)?;
        if out.len() > MAX_HOSTS {
            return Err(err(
                expr,
                start,
                format!("expands to more than {MAX_HOSTS} hosts"),
            ));
        }
    }
    Ok(dedup(out))
}

/// Compresses host names into the shortest Slurm expression that keeps their order.
///
/// Consecutive hosts that share a prefix and whose trailing numbers count up by one become
/// a range; consecutive ranges with the same prefix share one bracket.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut runs: Vec<Run<'_>> = Vec::new();
    for host in hosts {
        let host = host.as_ref();
        let (prefix, digits) = split_suffix(host);
        let Some(digits) = digits else {
            runs.push(Run::Plain(host));
            continue;
        };
        let num: u64 = digits
            .parse()
            .expect("split_suffix returns at most 18 ASCII digits");
        if let Some(Run::Range {
            prefix: p,
            hi,
            width,
            ..
        }) = runs.last_mut()
            && *p == prefix
            && num == *hi + 1
            && padded_eq(num, *width, digits)
        {
            *hi = num;
            continue;
        }
        runs.push(Run::Range {
            prefix,
            lo: num,
            hi: num,
            width: digits.len(),
        });
    }

    let mut out = String::new();
    let mut i = 0;
    while i < runs.len() {
        if !out.is_empty() {
            out.push(',');
        }
        match runs[i] {
            Run::Plain(h) => {
                out.push_str(h);
                i += 1;
            }
            Run::Range { prefix, .. } => {
                let mut j = i + 1;
                while j < runs.len()
                    && matches!(runs[j], Run::Range { prefix: p, .. } if p == prefix)
                {
                    j += 1;
                }
                out.push_str(prefix);
                let single = j == i + 1 && matches!(runs[i], Run::Range { lo, hi, .. } if lo == hi);
                if !single {
                    out.push('[');
                }
                for (k, run) in runs[i..j].iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    if let Run::Range { lo, hi, width, .. } = *run {
                        push_padded(&mut out, lo, width);
                        if hi != lo {
                            out.push('-');
                            push_padded(&mut out, hi, width);
                        }
                    }
                }
                if !single {
                    out.push(']');
                }
                i = j;
            }
        }
    }
    out
}

/// One piece of compressed output: a name without a trailing number, or a numeric range.
enum Run<'a> {
    Plain(&'a str),
    Range {
        prefix: &'a str,
        lo: u64,
        hi: u64,
        width: usize,
    },
}

fn padded_eq(num: u64, width: usize, digits: &str) -> bool {
    let mut s = String::with_capacity(width);
    push_padded(&mut s, num, width);
    s == digits
}

fn push_padded(out: &mut String, num: u64, width: usize) {
    write!(out, "{num:0width$}").expect("writing to a String cannot fail");
}

/// Splits a host name into its prefix and trailing digits (`None` if there are none or too
/// many to be a node number).
fn split_suffix(host: &str) -> (&str, Option<&str>) {
    let cut = host.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let digits = &host[cut..];
    if digits.is_empty() || digits.len() > MAX_DIGITS {
        (host, None)
    } else {
        (&host[..cut], Some(digits))
    }
}

fn dedup(hosts: Vec<String>) -> Vec<String> {
    let keep: Vec<bool> = {
        let mut seen = HashSet::with_capacity(hosts.len());
        hosts.iter().map(|h| seen.insert(h.as_str())).collect()
    };
    if keep.iter().all(|k| *k) {
        return hosts;
    }
    hosts
        .into_iter()
        .zip(keep)
        .filter_map(|(h, k)| k.then_some(h))
        .collect()
}

fn err(input: &str, pos: usize, reason: impl Into<String>) -> Error {
    Error::Hostlist {
        input: input.to_owned(),
        pos,
        reason: reason.into(),
    }
}

/// Splits at top-level separators; returns each non-empty item with its byte offset.
fn split_top(expr: &str) -> Result<Vec<(usize, &str)>> {
    let mut items = Vec::new();
    let mut open: Option<usize> = None;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' => {
                if let Some(at) = open {
                    return Err(err(
                        expr,
                        i,
                        format!("'[' inside the bracket opened at {at}"),
                    ));
                }
                open = Some(i);
            }
            ']' if open.take().is_none() => {
                return Err(err(expr, i, "']' without a matching '['"));
            }
            c if (c == ',' || c.is_whitespace()) && open.is_none() => {
                if i > start {
                    items.push((start, &expr[start..i]));
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if let Some(at) = open {
        return Err(err(expr, at, "'[' is never closed"));
    }
    if expr.len() > start {
        items.push((start, &expr[start..]));
    }
    Ok(items)
}

/// A parsed piece of one item: literal text or a bracket's ranges `(lo, hi, width)`.
enum Seg<'a> {
    Lit(&'a str),
    Ranges(Vec<(u64, u64, usize)>),
}

fn expand_item(expr: &str, base: usize, item: &str, out: &mut Vec<String>) -> Result<()> {
    let mut segs = Vec::new();
    let mut count: usize = 1;
    let mut rest = item;
    let mut off = base;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            segs.push(Seg::Lit(&rest[..open]));
        }
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .expect("split_top checked that every '[' is closed");
        let inner = &rest[open + 1..close];
        let ranges = parse_ranges(expr, off + open + 1, inner)?;
        let n: usize = ranges
            .iter()
            .map(|(lo, hi, _)| (hi - lo) as usize + 1)
            .sum();
        count = count
            .checked_mul(n)
            .filter(|c| *c <= MAX_HOSTS)
            .ok_or_else(|| {
                err(
                    expr,
                    base,
                    format!("expands to more than {MAX_HOSTS} hosts"),
                )
            })?;
        segs.push(Seg::Ranges(ranges));
        off += close + 1;
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        segs.push(Seg::Lit(rest));
    }

    let mut names = vec![String::new()];
    for seg in &segs {
        match seg {
            Seg::Lit(s) => names.iter_mut().for_each(|n| n.push_str(s)),
            Seg::Ranges(ranges) => {
                let mut next = Vec::with_capacity(names.len().saturating_mul(count.min(1 << 16)));
                for name in &names {
                    for &(lo, hi, width) in ranges {
                        for num in lo..=hi {
                            let mut n = name.clone();
                            push_padded(&mut n, num, width);
                            next.push(n);
                        }
                    }
                }
                names = next;
            }
        }
    }
    out.extend(names);
    Ok(())
}

/// An upper bound of the bytes `item` (at `base` in `expr`) expands to, without expanding
/// it: hosts times the longest name.
fn expanded_bytes(expr: &str, base: usize, item: &str) -> Result<usize> {
    let mut hosts: u64 = 1;
    let mut longest: u64 = 0;
    let mut rest = item;
    let mut off = base;
    while let Some(open) = rest.find('[') {
        longest += open as u64;
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .expect("split_top checked that every '[' is closed");
        let ranges = parse_ranges(expr, off + open + 1, &rest[open + 1..close])?;
        let n: u64 = ranges.iter().map(|(lo, hi, _)| hi - lo + 1).sum();
        let width = ranges
            .iter()
            .map(|&(_, hi, w)| (w as u64).max(hi.checked_ilog10().unwrap_or(0) as u64 + 1))
            .max()
            .unwrap_or(0);
        hosts = hosts.saturating_mul(n);
        longest += width;
        off += close + 1;
        rest = &rest[close + 1..];
    }
    longest += rest.len() as u64;
    Ok(hosts.saturating_mul(longest).min(usize::MAX as u64) as usize)
}

/// Parses the inside of a bracket, `0001-0128,0130`; `base` is its offset in `expr`.
fn parse_ranges(expr: &str, base: usize, inner: &str) -> Result<Vec<(u64, u64, usize)>> {
    let mut ranges = Vec::new();
    let mut total: u64 = 0;
    let mut off = base;
    for piece in inner.split(',') {
        if piece.is_empty() {
            return Err(err(expr, off, "empty range in brackets"));
        }
        let (lo_s, hi_s, hi_off) = match piece.split_once('-') {
            Some((lo, hi)) => (lo, hi, off + lo.len() + 1),
            None => (piece, piece, off),
        };
        let lo = parse_num(expr, off, lo_s)?;
        let hi = parse_num(expr, hi_off, hi_s)?;
        if hi < lo {
            return Err(err(
                expr,
                off,
                format!("range {lo_s}-{hi_s} runs backwards"),
            ));
        }
        total = total.saturating_add(hi - lo + 1);
        if total > MAX_HOSTS as u64 {
            return Err(err(
                expr,
                off,
                format!("range expands to more than {MAX_HOSTS} hosts"),
            ));
        }
        ranges.push((lo, hi, lo_s.len()));
        off += piece.len() + 1;
    }
    Ok(ranges)
}

fn parse_num(expr: &str, pos: usize, s: &str) -> Result<u64> {
    if s.is_empty() {
        return Err(err(expr, pos, "expected a number"));
    }
    if let Some(bad) = s.find(|c: char| !c.is_ascii_digit()) {
        return Err(err(expr, pos + bad, "expected a digit, '-', ',' or ']'"));
    }
    if s.len() > MAX_DIGITS {
        return Err(err(
            expr,
            pos,
            format!("number longer than {MAX_DIGITS} digits"),
        ));
    }
    Ok(s.parse().expect("at most 18 ASCII digits fit in a u64"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_names_stay_plain() {
        assert_eq!(compress(&["login1"]), "login1");
        assert_eq!(compress(&["a", "b1"]), "a,b1");
    }

    #[test]
    fn positions_point_at_the_problem() {
        let Err(Error::Hostlist { pos, .. }) = expand("cn[1-2,x]") else {
            panic!()
        };
        assert_eq!(pos, 7);
    }

    #[test]
    fn a_huge_cluster_hostlist_is_refused_before_allocating() {
        let expr = format!("{}[1-4000000]", "n".repeat(3000));
        let t0 = std::time::Instant::now();
        let e = expand(&expr).expect_err("12 GB of names");
        assert!(e.to_string().contains("MiB of host names"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        // Many items that are each small add up too.
        let many = (0..40)
            .map(|i| format!("{}{i}-[1-100000]", "x".repeat(20)))
            .collect::<Vec<_>>()
            .join(",");
        assert!(expand(&many).is_err());
        // A real cluster is far below it.
        assert_eq!(expand("cn[00001-17560]").expect("fine").len(), 17560);
    }
}
