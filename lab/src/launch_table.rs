//! The launch benchmark's table and the default's goals, for a person: each method's
//! start beside urgent-first's, the methods that failed with their reasons, and the goals
//! of issue 28 judged on the run.

use std::fmt::Write as _;

use super::{Method, Outcome, Report};

/// The table for a person: each method's application start everywhere, and how much
/// later than urgent-first it is; then each method that failed, with its reason.
pub fn table(rep: &Report) -> String {
    let base = rep
        .outcomes
        .iter()
        .find(|o| o.method == Method::UrgentFirst)
        .map(|o| o.app_s);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  {:<15} {:>10} {:>9} {:>10} {:>9} {:>13} {:>10}  detail",
        "method", "app start", "vs urgent", "urgent set", "uplinks", "cpu self+apps", "throttled"
    );
    for o in &rep.outcomes {
        let ratio = base.map_or(String::from("-"), |b| format!("{:.1}x", o.app_s / b));
        let urgent = o
            .urgent_s
            .map_or(String::from("-"), |s| format!("{s:.2} s"));
        let mut detail = o.detail.clone();
        if o.ok < o.nodes {
            let _ = write!(detail, " [app FAILED on {} of {}]", o.nodes - o.ok, o.nodes);
        }
        let _ = writeln!(
            t,
            "  {:<15} {:>8.2} s {:>9} {:>10} {:>6.1} MiB {:>13} {:>10}  {detail}",
            o.method.name(),
            o.app_s,
            ratio,
            urgent,
            o.uplink_in_bytes as f64 / f64::from(1u32 << 20),
            format!("{:.1}+{:.1} s", o.method_cpu_s(), o.app_cpu_s),
            throttled_per_node(o),
        );
    }
    for f in &rep.failures {
        let _ = writeln!(
            t,
            "  {:<15} {:>10}  {}",
            f.method.name(),
            "FAILED",
            first_line(&f.reason, 200)
        );
    }
    if let Some(n) = rep
        .outcomes
        .iter()
        .map(|o| o.rounds.len())
        .max()
        .filter(|n| *n > 1)
    {
        let _ = writeln!(
            t,
            "  every figure is a median over up to {n} rounds (each round's start in its detail)"
        );
    }
    if let Some(local) = rep.local_s {
        let _ = writeln!(
            t,
            "  application started everywhere from local data, nothing streaming: {local:.2} s{}",
            base.map_or(String::new(), |b| format!(
                " (urgent-first: {:.2}x of it)",
                b / local
            ))
        );
    }
    t.push_str(&goals(rep));
    t.push_str(&crate::image::goals(rep));
    t
}

/// The first line of `s`, cut at `max` characters (the whole reason is in the figures).
pub(super) fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    match line.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None if s.lines().nth(1).is_some() => format!("{line} ..."),
        None => line.to_string(),
    }
}

/// How long each node waited on its CPU quota during a method, on average: beside the
/// application's start it tells whether the model's CPU held the method back.
fn throttled_per_node(o: &Outcome) -> String {
    match o.throttled_s {
        Some(s) if o.nodes > 0 => format!("{:.2} s", s / o.nodes as f64),
        _ => "-".into(),
    }
}

/// A goal's ratio, with each round's own when the run had rounds: `ratio` of one run's
/// outcomes and start from local data; over rounds, the median of each round's own ratio.
/// Pairing the methods within a round cancels what moves every method of a round together
/// (this machine's speed drifts between rounds), which a ratio of two medians taken from
/// different rounds does not: it can pass while every round misses.
pub(crate) fn paired(
    rep: &Report,
    ratio: impl Fn(&[Outcome], Option<f64>) -> Option<f64>,
) -> Option<(f64, Vec<f64>)> {
    if rep.each_round.is_empty() {
        return ratio(&rep.outcomes, rep.local_s).map(|r| (r, Vec::new()));
    }
    let each: Vec<f64> = (rep.each_round.iter().enumerate())
        .filter_map(|(i, os)| ratio(os, rep.each_local.get(i).copied().flatten()))
        .collect();
    Some((super::rounds::median(&each)?, each))
}

/// `m`'s outcome among `os`.
pub(crate) fn of(os: &[Outcome], m: Method) -> Option<&Outcome> {
    os.iter().find(|o| o.method == m)
}

/// " (rounds 1.18x, 1.04x)" after a goal judged on rounds, each shown by `show`.
pub(crate) fn by_round(each: &[f64], show: impl Fn(f64) -> String) -> String {
    if each.len() < 2 {
        return String::new();
    }
    let shown: Vec<String> = each.iter().map(|&r| show(r)).collect();
    format!(" (rounds {})", shown.join(", "))
}

/// The default's goals (DESIGN.md, issue 28), judged on this run (over rounds, on the
/// median of each round's own ratio, [`paired`]): each line gives the ratio, the goal,
/// and where a ratio cannot reach its goal by construction the cap.
pub fn goals(rep: &Report) -> String {
    let find = |m: Method| of(&rep.outcomes, m);
    let failed = |m: Method| rep.failures.iter().any(|f| f.method == m);
    let Some(def) = find(Method::UrgentFirst) else {
        if failed(Method::UrgentFirst) {
            return "  goals for the default (urgent-first): not judged, it failed\n".into();
        }
        return String::new();
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let x = |r: f64| format!("{r:.2}x");
    let mut t = String::from("  goals for the default (urgent-first):\n");
    let to_local =
        |os: &[Outcome], local: Option<f64>| Some(of(os, Method::UrgentFirst)?.app_s / local?);
    if let Some((r, each)) = paired(rep, to_local) {
        let _ = writeln!(
            t,
            "    start within 1.3x of local data:     {r:5.2}x  {}{}",
            verdict(r <= 1.3),
            by_round(&each, x)
        );
    }
    let sooner = |m: Method, goal: f64, t: &mut String| {
        let label = format!("{goal}x sooner than {}:", m.name());
        let Some(o) = find(m) else {
            if failed(m) {
                let _ = writeln!(t, "    {label:<36} not measured: {} failed", m.name());
            }
            return;
        };
        let ratio = |os: &[Outcome], _: Option<f64>| {
            Some(of(os, m)?.app_s / of(os, Method::UrgentFirst)?.app_s)
        };
        let Some((r, each)) = paired(rep, ratio) else {
            return;
        };
        // No method starts sooner than from local data, so (copy + start) / start caps it.
        let cap = rep.local_s.map(|l| o.app_s / l);
        let capped = cap
            .filter(|c| *c < goal)
            .map_or(String::new(), |c| format!(" (cap {c:.2}x)"));
        let _ = writeln!(
            t,
            "    {label:<36} {r:5.2}x  {}{capped}{}",
            verdict(r >= goal),
            by_round(&each, x)
        );
    };
    sooner(Method::CopyFirst, 2.0, &mut t);
    sooner(Method::Sbcast, 5.0, &mut t);
    let to_demand = |os: &[Outcome], _: Option<f64>| {
        Some(of(os, Method::UrgentFirst)?.app_s / of(os, Method::DemandOnly)?.app_s)
    };
    if let Some((r, each)) = paired(rep, to_demand) {
        let _ = writeln!(
            t,
            "    never slower than demand-only:       {r:5.2}x  {}{}",
            verdict(r <= 1.0),
            by_round(&each, x)
        );
    } else if failed(Method::DemandOnly) {
        let _ = writeln!(
            t,
            "    never slower than demand-only:       not measured: demand-only failed"
        );
    }
    if let Some(c) = find(Method::CopyFirst) {
        // The goal counts the method's own CPU (daemons and root); the applications'
        // (their reads through the mount included) is shown beside it.
        let more = |os: &[Outcome], _: Option<f64>| {
            Some(
                of(os, Method::UrgentFirst)?.method_cpu_s()
                    / of(os, Method::CopyFirst)?.method_cpu_s()
                    - 1.0,
            )
        };
        let Some((more, each)) = paired(rep, more) else {
            return t;
        };
        let with_apps = def.cpu_s / c.cpu_s - 1.0;
        let _ = writeln!(
            t,
            "    CPU at most copy-first's + 10%:      {:+5.1}%  {}{} ({:.1} s against {:.1} s; \
             with the applications {:+.1}%: {:.1} s against {:.1} s)",
            more * 100.0,
            verdict(more <= 0.10),
            by_round(&each, |r| format!("{:+.1}%", r * 100.0)),
            def.method_cpu_s(),
            c.method_cpu_s(),
            with_apps * 100.0,
            def.cpu_s,
            c.cpu_s
        );
    }
    t
}
