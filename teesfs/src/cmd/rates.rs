//! The link rates pushes learn, between the store and the planner: after a push, its
//! figures go into `STORE/learned/rates.json` ([`fold`]); a plan without configured rates
//! takes the estimate from there ([`load`]). Both are best-effort: a file that cannot be
//! read or written is a warning, and the push goes on unrated. The estimator and the
//! override rule are `pushreport::rates`; the file's reading and writing `seeder::rates`.
//! Two pushes that end at once each fold into the file they read: the later rename wins and
//! the other push's figures are lost, which costs one sample of many.

use std::path::{Path, PathBuf};

use pushreport::PushReport;
use pushreport::rates::{Learned, LearnedRates, PushFigures, observe};
use seeder::DirStore;

/// Seconds since the Unix epoch.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The kept figures of the store at `store`: empty when there are none, and (with a
/// warning) when they are unusable.
fn read(store: &DirStore) -> LearnedRates {
    let bytes = match seeder::rates::read_rates(store) {
        Ok(Some(b)) => b,
        Ok(None) => return LearnedRates::default(),
        Err(e) => {
            errln!("teesfs: warning: {e}");
            return LearnedRates::default();
        }
    };
    LearnedRates::from_json(&bytes).unwrap_or_else(|e| {
        errln!(
            "teesfs: warning: {}: {e}",
            seeder::rates::rates_path(store).display()
        );
        LearnedRates::default()
    })
}

/// The rates the pushes from the store at `store` learned, if any.
pub fn load(store: &Path) -> Option<Learned> {
    let store = DirStore::open(store).ok()?;
    read(&store).estimate(now())
}

/// Folds what the push of `rep` measured into the store's learned rates; returns the file
/// when it was written. A store this user cannot write (a shared store of someone else's)
/// keeps its figures without this push's.
pub fn fold(store: &Path, rep: &PushReport) -> Option<PathBuf> {
    let seen = observe(rep);
    if seen.is_empty() {
        return None;
    }
    let Ok(store) = DirStore::open(store) else {
        return None;
    };
    let mut file = read(&store);
    let now = now();
    file.fold(
        PushFigures {
            at: now,
            job: rep.job.clone(),
            figures: seen.figures,
            at_least: seen.at_least,
        },
        now,
    );
    match seeder::rates::write_rates(&store, &file.to_json()) {
        Ok(path) => {
            tracing::debug!(path = %path.display(), ?seen, "link rates learned");
            return Some(path);
        }
        Err(seeder::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            tracing::debug!("the store's learned link rates are not this user's to write");
        }
        Err(e) => errln!("teesfs: warning: the link rates this push measured were not kept: {e}"),
    }
    None
}
