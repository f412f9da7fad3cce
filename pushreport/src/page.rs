//! The HTML page of a push report: the summary as a table, the picture inline, then the
//! tables the picture cannot hold (failures, groups and uplinks, edges, tree levels, and
//! for small jobs every node). Long tables are cut, saying so, to keep the page a few MB
//! at most at 17,560 nodes; the JSON report has everything.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::draw::svg_of;
use super::model::{Arrivals, Model, Spread};
use super::{esc, human_bytes, human_secs, human_when};
use crate::Error;
use crate::format::PushReport;

/// Most rows of the edge and failure tables.
const MAX_TABLE_ROWS: usize = 300;

/// The page: the title, a summary table, the picture ([`super::svg`]) and the tables.
pub fn html(rep: &PushReport, title: &str) -> Result<String, Error> {
    crate::read::check_times(rep, crate::Limits::default().max_seconds)?;
    let m = Model::new(rep);
    let picture = svg_of(&m, title)?;
    let mut out = String::with_capacity(picture.len() + 64 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"generator\" content=\"teesfs report\"><title>{t}</title><style>\
         body{{font-family:sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse;margin:0.5em 0 1.5em}}\
         td,th{{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd;font-size:13px}}\
         td.n{{text-align:right;font-variant-numeric:tabular-nums}}\
         .failed{{color:#d01010;font-weight:bold}} .note{{color:#556677}}\
         .figure{{overflow-x:auto}}\
         </style></head><body>\n<h1>{t}</h1>\n",
        t = esc(title)
    );
    summary(&mut out, &m);
    let _ = writeln!(out, "<div class=\"figure\" id=\"picture\">{picture}</div>");
    failures(&mut out, rep);
    groups(&mut out, &m);
    levels(&mut out, &m);
    edges(&mut out, rep);
    if m.detail {
        nodes(&mut out, &m);
    }
    out.push_str("</body></html>\n");
    Ok(out)
}

fn summary(out: &mut String, m: &Model<'_>) {
    let r = m.rep;
    let uplink_in = r.predicted_uplink_in();
    let mut rows: Vec<(&str, String)> = vec![
        ("job", super::job_label(&r.job)),
        ("index", r.index.clone()),
        ("strategy", r.strategy.clone()),
        ("root", r.root.clone()),
        (
            "nodes",
            format!(
                "{} in {} group(s), tree depth {}",
                r.nodes,
                m.groups.len(),
                m.max_depth()
            ),
        ),
        (
            "layer",
            format!("{} in {} chunks", human_bytes(r.total_bytes), r.chunks),
        ),
        (
            "urgent set",
            format!(
                "{} in {} chunks",
                human_bytes(r.urgent_bytes),
                r.urgent_chunks
            ),
        ),
        ("streamed to every node", human_bytes(r.streamed_bytes)),
        ("urgent set on every node", human_when(r.urgent_complete_s)),
        ("whole layer on every node", human_when(r.all_complete_s)),
    ];
    if !r.uplinks.is_empty() {
        rows.push((
            "into groups over their uplinks",
            format!(
                "{} (minimum, each group once: {})",
                human_bytes(uplink_in),
                human_bytes(r.streamed_bytes.saturating_mul(r.uplinks.len() as u64))
            ),
        ));
    }
    rows.push(("failures", r.failures.len().to_string()));
    out.push_str("<table id=\"summary\">");
    for (k, v) in rows {
        let class = if k == "failures" && !r.failures.is_empty() {
            " class=\"failed\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr><th>{}</th><td{class}>{}</td></tr>",
            esc(k),
            esc(&v)
        );
    }
    out.push_str("</table>\n");
}

fn failures(out: &mut String, rep: &PushReport) {
    if rep.failures.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h2 class=\"failed\">Failures ({})</h2>\n<table id=\"failures\"><tr><th>kind</th>\
         <th>parent</th><th>child</th><th>at</th><th>reason</th></tr>",
        rep.failures.len()
    );
    for f in rep.failures.iter().take(MAX_TABLE_ROWS) {
        let _ = write!(
            out,
            "<tr class=\"failed\"><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            f.kind,
            esc(&f.parent),
            esc(&f.child),
            human_secs(f.at_s),
            esc(f.reason.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>\n");
    cut_note(out, rep.failures.len());
}

fn spread_cells(out: &mut String, s: Option<Spread>) {
    match s {
        Some(s) => {
            let _ = write!(
                out,
                "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
                human_secs(s.min),
                human_secs(s.median),
                human_secs(s.max)
            );
        }
        None => out.push_str("<td>never</td><td></td><td></td>"),
    }
}

fn arrival_cells(out: &mut String, a: &Arrivals) {
    spread_cells(out, a.urgent);
    spread_cells(out, a.all);
    let class = if a.failed > 0 {
        " class=\"failed n\""
    } else {
        " class=\"n\""
    };
    let _ = write!(out, "<td{class}>{}</td>", a.failed);
}

const ARRIVAL_HEADS: &str = "<th>urgent first</th><th>median</th><th>last</th>\
     <th>whole first</th><th>median</th><th>last</th><th>failed</th>";

fn groups(out: &mut String, m: &Model<'_>) {
    let _ = write!(
        out,
        "<h2>Groups and their uplinks ({})</h2>\n<table id=\"groups\"><tr><th>group</th>\
         <th>proxy</th><th>nodes</th><th>uplink in</th><th>uplink out</th>{ARRIVAL_HEADS}</tr>",
        m.groups.len()
    );
    let bytes = |b: Option<u64>| b.map_or_else(String::new, human_bytes);
    for g in &m.groups {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
            esc(&g.label),
            esc(g.proxy.as_deref().unwrap_or("")),
            g.nodes.len(),
            bytes(g.in_bytes),
            bytes(g.out_bytes)
        );
        arrival_cells(out, &g.arrivals);
        out.push_str("</tr>");
    }
    out.push_str("</table>\n");
}

fn levels(out: &mut String, m: &Model<'_>) {
    let _ = write!(
        out,
        "<h2>Tree levels</h2>\n<table id=\"levels\"><tr><th>depth below the root</th>\
         <th>nodes</th>{ARRIVAL_HEADS}</tr>"
    );
    for (d, a, count) in m.levels() {
        let _ = write!(
            out,
            "<tr><td class=\"n\">{d}</td><td class=\"n\">{count}</td>"
        );
        arrival_cells(out, &a);
        out.push_str("</tr>");
    }
    out.push_str("</table>\n");
}

fn edges(out: &mut String, rep: &PushReport) {
    let mut sorted: Vec<_> = rep.edges.iter().collect();
    // The heaviest first: those are the ones worth a look at scale.
    sorted.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.child.cmp(&b.child)));
    let _ = write!(
        out,
        "<h2>Bytes per edge ({})</h2>\n<table id=\"edges\"><tr><th>parent</th><th>child</th>\
         <th>bytes</th></tr>",
        rep.edges.len()
    );
    let failed_edges: HashSet<(&str, &str)> = rep
        .failures
        .iter()
        .map(|f| (f.parent.as_str(), f.child.as_str()))
        .collect();
    for e in sorted.iter().take(MAX_TABLE_ROWS) {
        let failed = failed_edges.contains(&(e.parent.as_str(), e.child.as_str()));
        let class = if failed { " class=\"failed\"" } else { "" };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(&e.parent),
            esc(&e.child),
            human_bytes(e.bytes)
        );
    }
    out.push_str("</table>\n");
    cut_note(out, rep.edges.len());
}

fn nodes(out: &mut String, m: &Model<'_>) {
    let rep = m.rep;
    out.push_str(
        "<h2>Nodes</h2>\n<table id=\"nodes\"><tr><th>host</th><th>group</th><th>parent</th>\
         <th>urgent set</th><th>whole layer</th><th>application started</th></tr>",
    );
    for n in &rep.per_node {
        let failed = m.failed.contains(n.host.as_str());
        let class = if failed { " class=\"failed\"" } else { "" };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&n.host),
            n.group.map_or_else(String::new, |g| g.to_string()),
            esc(&n.parent),
            human_when(n.urgent_s),
            human_when(n.all_s),
            n.app_start_s.map_or_else(String::new, human_secs)
        );
    }
    out.push_str("</table>\n");
}

fn cut_note(out: &mut String, total: usize) {
    if total > MAX_TABLE_ROWS {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} more not shown; the JSON report has them all.</p>",
            total - MAX_TABLE_ROWS
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::sample;

    #[test]
    fn the_page_holds_the_summary_the_picture_and_the_tables() {
        let rep = sample(4, 8);
        let h = html(&rep, "job <1>").expect("page");
        assert!(h.starts_with("<!doctype html>"));
        assert!(h.contains("<title>job &lt;1&gt;</title>"));
        for id in [
            "summary", "picture", "failures", "groups", "levels", "edges", "nodes",
        ] {
            assert!(h.contains(&format!("id=\"{id}\"")), "no {id}");
        }
        assert!(h.contains("<svg"));
        assert!(h.contains("64.0 MiB (minimum, each group once: 64.0 MiB)"));
        assert!(h.contains("<td>cn00009</td><td>cn00010</td>"));
    }

    #[test]
    fn a_huge_page_stays_a_few_megabytes() {
        let rep = sample(2195, 8);
        let h = html(&rep, "big").expect("page");
        assert!(!h.contains("id=\"nodes\""), "no per-node table at scale");
        assert!(h.contains("17260 more not shown"));
        assert!(h.len() < 3_000_000, "{} bytes", h.len());
    }
}
