//! One rendering of the engine families shared by every request that reads the same pages:
//! the same fetches, or fetches that brought the very same bytes (an engine page rarely changes
//! between two scrapes a few milliseconds apart, and a client that holds its answer, reading
//! slowly or not at all, then holds one copy of the page for all of them, not one each).

use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;

use super::gzip::Deflated;
use super::held::Charge;

/// Identifies one rendering of the engine families: the fetches it came from and the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RenderKey {
    pub(super) generations: Vec<u64>,
    pub(super) openmetrics: bool,
}

/// What a rendering was made from: the configuration in force (relabelling and added labels
/// depend on it), the upstreams read and each one's body, `None` where the fetch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sources {
    pub(super) runtime: u64,
    pub(super) which: Vec<usize>,
    pub(super) bodies: Vec<Option<Bytes>>,
}

/// A rendering and what it was made from; its gzip form once a request asks for it. Both are
/// charged to the answers' ledger while the rendering lives.
#[derive(Debug)]
pub(super) struct Rendered {
    pub(super) runs: Arc<[Bytes]>,
    pub(super) sources: Sources,
    pub(super) gzip: OnceLock<(Deflated, Charge)>,
    _held: Option<Charge>,
}

impl Rendered {
    pub(super) fn new(runs: Arc<[Bytes]>, sources: Sources, held: Option<Charge>) -> Rendered {
        Rendered {
            runs,
            sources,
            gzip: OnceLock::new(),
            _held: held,
        }
    }
}

type Cell = tokio::sync::OnceCell<Rendered>;

/// The latest shared rendering, held weakly: it lives only while the requests that share it
/// are being answered.
#[derive(Debug, Default)]
pub(super) struct Renders(Mutex<Option<(RenderKey, Weak<Cell>)>>);

impl Renders {
    /// The shared rendering for `key`, alive while some request holds it: the one of the same
    /// fetches, or of fetches whose bodies were byte for byte `sources`' (compared only while
    /// that rendering is still held), else a new one to fill.
    pub(super) fn cell(&self, key: RenderKey, sources: &Sources) -> Arc<Cell> {
        let mut slot = self.0.lock().expect("render cache lock");
        if let Some((k, weak)) = slot.as_mut()
            && let Some(cell) = weak.upgrade()
        {
            if *k == key {
                return cell;
            }
            let same_bytes = k.openmetrics == key.openmetrics
                && cell.get().is_some_and(|r| r.sources == *sources);
            if same_bytes {
                *k = key;
                return cell;
            }
        }
        let cell = Arc::new(Cell::new());
        *slot = Some((key, Arc::downgrade(&cell)));
        cell
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(body: &'static [u8]) -> Sources {
        Sources {
            runtime: 1,
            which: vec![0],
            bodies: vec![Some(Bytes::from_static(body))],
        }
    }

    fn key(generation: u64) -> RenderKey {
        RenderKey {
            generations: vec![generation],
            openmetrics: false,
        }
    }

    #[tokio::test]
    async fn fetches_of_the_same_bytes_share_one_rendering_while_it_is_held() {
        let renders = Renders::default();
        let first = renders.cell(key(1), &sources(b"a 1\n"));
        first
            .get_or_init(|| async {
                Rendered::new(
                    Arc::new([Bytes::from_static(b"a 1\n")]),
                    sources(b"a 1\n"),
                    None,
                )
            })
            .await;
        // A later fetch that brought the same bytes: the same rendering.
        let second = renders.cell(key(2), &sources(b"a 1\n"));
        assert!(Arc::ptr_eq(&first, &second));
        // Other bytes, another configuration or the other format: a rendering of its own.
        assert!(!Arc::ptr_eq(
            &first,
            &renders.cell(key(3), &sources(b"a 2\n"))
        ));
        let mut other_config = sources(b"a 1\n");
        other_config.runtime = 2;
        let fresh = renders.cell(key(4), &other_config);
        assert!(!Arc::ptr_eq(&first, &fresh));
        // Once nobody holds it, nothing is kept.
        drop((first, second, fresh));
        let again = renders.cell(key(5), &sources(b"a 1\n"));
        assert!(again.get().is_none());
    }
}
