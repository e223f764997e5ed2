//! Incidents kept: each closed (or opened) incident as the exact bytes served, its JSON and its
//! bundle; and, with `incidents.dir`, the bundles on disk, each written whole (a temporary
//! file renamed over it), at most `keep` files and `max_bytes`, the oldest removed first, read
//! back at start. A failed write (a full disk) leaves the incident in memory and is said once.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde_json::Value;

use super::bundle;
use super::incident::Incident;

/// An incident as served: its summary, its JSON text and its bundle, byte for byte.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub id: String,
    pub opened: f64,
    pub summary: Value,
    pub json: Bytes,
    pub bundle: Bytes,
}

impl Kept {
    /// `incident` as it is served now. Its summary is read from its JSON text, as it is when
    /// read back from disk, so that both list the same numbers.
    pub(crate) fn of(incident: &Incident) -> Kept {
        let json = incident.to_json().to_string().into_bytes();
        let bundle = bundle::write(incident, &json);
        Kept::from_parts(json, bundle).expect("an incident's own JSON")
    }

    /// The incident in a bundle read back from disk; `None` when it is not one of ours.
    fn from_bundle(bundle: Vec<u8>) -> Option<Kept> {
        Kept::from_parts(bundle::read_json(&bundle)?, bundle)
    }

    fn from_parts(json: Vec<u8>, bundle: Vec<u8>) -> Option<Kept> {
        let full: Value = serde_json::from_slice(&json).ok()?;
        let summary: serde_json::Map<String, Value> = [
            "id",
            "upstream",
            "kind",
            "opened_unix_seconds",
            "closed_unix_seconds",
            "duration_seconds",
            "reason",
        ]
        .into_iter()
        .map(|k| (k.to_owned(), full.get(k).cloned().unwrap_or(Value::Null)))
        .collect();
        Some(Kept {
            id: full.get("id")?.as_str()?.to_owned(),
            opened: full.get("opened_unix_seconds")?.as_f64()?,
            summary: Value::Object(summary),
            json: Bytes::from(json),
            bundle: Bytes::from(bundle),
        })
    }
}

/// The directory incidents are kept in.
#[derive(Debug)]
pub(crate) struct Store {
    pub dir: PathBuf,
    pub keep: usize,
    pub max_bytes: usize,
    /// A failed write was logged: the next ones are not.
    said: bool,
}

const SUFFIX: &str = ".tar.gz";

impl Store {
    /// The store in `dir`, made if missing (the configuration checked that it can be; a
    /// failure here shows at the first write).
    pub(crate) fn new(dir: PathBuf, keep: usize, max_bytes: usize) -> Store {
        let _ = std::fs::create_dir_all(&dir);
        Store {
            dir,
            keep,
            max_bytes,
            said: false,
        }
    }

    /// Whether a failed write was logged (and the next are not).
    #[cfg(test)]
    pub(crate) fn said(&self) -> bool {
        self.said
    }

    /// Every incident in the directory, oldest first; files that are not bundles are left.
    pub(crate) fn read_back(&self) -> Vec<Kept> {
        let mut kept: Vec<Kept> = self
            .files()
            .into_iter()
            .filter_map(|(path, _)| Kept::from_bundle(std::fs::read(path).ok()?))
            .collect();
        kept.sort_by(|a, b| a.opened.total_cmp(&b.opened).then_with(|| a.id.cmp(&b.id)));
        kept
    }

    /// Makes room for `kept` within the directory's bounds, then writes it whole: the bundles
    /// in the directory never number more than `keep` nor take more than `max_bytes`.
    pub(crate) fn write(&mut self, kept: &Kept) {
        let path = self.dir.join(format!("{}{SUFFIX}", kept.id));
        self.trim(&path, kept.bundle.len() as u64);
        let tmp = self.dir.join(format!(".{}{SUFFIX}.tmp", kept.id));
        let written = write_synced(&tmp, &kept.bundle).and_then(|()| std::fs::rename(&tmp, &path));
        match written {
            Ok(()) => self.said = false,
            Err(error) => {
                let _ = std::fs::remove_file(&tmp);
                if !self.said {
                    tracing::error!(
                        dir = %self.dir.display(),
                        incident = %kept.id,
                        %error,
                        "cannot write the incident: it stays in memory only (said once)"
                    );
                    self.said = true;
                }
            }
        }
    }

    /// Removes the oldest bundles until, with `adding` (`len` bytes, replacing the bundle of
    /// that path if there is one), at most `keep` and `max_bytes` are left.
    fn trim(&self, adding: &Path, len: u64) {
        let mut files = self.files();
        files.retain(|(path, _)| path != adding);
        let mut total: u64 = files.iter().map(|(_, len)| len).sum::<u64>() + len;
        // Oldest first: the ids begin with the opening's second, then a sequence number.
        files.sort_by_key(|(path, _)| order(path));
        let mut count = files.len() + 1;
        for (path, len) in files {
            if count <= self.keep && total <= self.max_bytes as u64 {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                count -= 1;
                total -= len;
            }
        }
    }

    /// The bundles in the directory, with their lengths.
    fn files(&self) -> Vec<(PathBuf, u64)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.ends_with(SUFFIX) && !name.starts_with('.')
            })
            .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
            .collect()
    }
}

/// A file's place in time: the opening's second and the sequence number of its id.
fn order(path: &Path) -> (u64, u64) {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let id = name.strip_suffix(SUFFIX).unwrap_or(&name);
    let mut parts = id.splitn(2, '-').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}
