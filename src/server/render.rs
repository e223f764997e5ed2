//! One rendering of the engine families shared by every request that reads the same fetches.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// The latest shared rendering of the engine families, held weakly: it lives only while the
/// requests that share it are being answered.
type RenderSlot = Option<(
    RenderKey,
    std::sync::Weak<tokio::sync::OnceCell<Arc<[Bytes]>>>,
)>;

/// Identifies one rendering of the engine families: the fetches it came from and the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RenderKey {
    pub(super) generations: Vec<u64>,
    pub(super) openmetrics: bool,
}

/// The latest shared rendering of the engine families.
#[derive(Debug, Default)]
pub(super) struct Renders(Mutex<RenderSlot>);

impl Renders {
    /// The shared rendering for `key`, alive while some request holds it.
    pub(super) fn cell(&self, key: RenderKey) -> Arc<tokio::sync::OnceCell<Arc<[Bytes]>>> {
        let mut slot = self.0.lock().expect("render cache lock");
        if let Some((k, weak)) = slot.as_ref()
            && *k == key
            && let Some(cell) = weak.upgrade()
        {
            return cell;
        }
        let cell = Arc::new(tokio::sync::OnceCell::new());
        *slot = Some((key, Arc::downgrade(&cell)));
        cell
    }
}
