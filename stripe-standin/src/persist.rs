//! The state file: with `Config::state_file`, everything the stand-in holds (objects, events,
//! idempotency answers, test clocks, webhook endpoints and their secrets) is read at start and
//! written back shortly after every change and once more at a clean stop, so a restarted
//! stand-in answers for what it made before. Each write goes to a temporary file beside it,
//! synced, then renamed over it: a crash leaves the old state or the new one, never half.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::state::{Inner, Store};

/// How long after a change the state is written: requests in a burst share one write.
pub const SAVE_AFTER: Duration = Duration::from_millis(200);

/// The state in `path`, or None when there is no file yet.
pub fn read(path: &Path) -> std::io::Result<Option<Inner>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
}

/// The stand-in now answers at `new` instead of `old`: the links it gave out (checkout pages,
/// hosted invoices), in its objects and in its stored idempotent answers, follow it.
pub fn rebase(inner: &mut Inner, old: &str, new: &str) {
    if old.is_empty() || old == new {
        return;
    }
    // With the slash, so `…:4123` never matches inside `…:41234`.
    let (old, new) = (format!("{old}/"), format!("{new}/"));
    for table in [
        &mut inner.customers,
        &mut inner.products,
        &mut inner.prices,
        &mut inner.sessions,
        &mut inner.subscriptions,
        &mut inner.items,
        &mut inner.invoices,
        &mut inner.invoice_items,
        &mut inner.invoice_payments,
        &mut inner.events,
        &mut inner.clocks,
        &mut inner.endpoints,
        &mut inner.schedules,
    ] {
        for value in table.values_mut() {
            rebase_value(value, &old, &new);
        }
    }
    for answer in inner.idempotency.values_mut() {
        answer.body = answer.body.replace(&old, &new);
    }
}

fn rebase_value(value: &mut Value, old: &str, new: &str) {
    match value {
        Value::String(s) if s.starts_with(old) => *s = s.replacen(old, new, 1),
        Value::Array(items) => items.iter_mut().for_each(|v| rebase_value(v, old, new)),
        Value::Object(fields) => fields.values_mut().for_each(|v| rebase_value(v, old, new)),
        _ => {}
    }
}

/// Write `body` to `path`, readable by the owner only (it holds the webhook secrets): a
/// temporary file beside it, synced, then renamed over it.
fn write_atomically(path: &Path, body: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// The background writer of the state file.
pub struct Saver {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Saver {
    pub fn start(store: Store, path: PathBuf) -> Saver {
        let (stop, stopped) = watch::channel(false);
        // Counted now, not when the task first runs: a change made before then is still written.
        let saved = store.read_for_save(|_| ()).0;
        let task = tokio::spawn(run(store, path, saved, stopped));
        Saver { stop, task }
    }

    /// Write what is not written yet, then stop.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        // The task only ends after its last write.
        let _ = self.task.await;
    }
}

async fn run(store: Store, path: PathBuf, mut saved: u64, mut stopped: watch::Receiver<bool>) {
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(SAVE_AFTER) => false,
            _ = stopped.changed() => true,
        };
        saved = save_if_changed(&store, &path, saved).await;
        if stopping {
            return;
        }
    }
}

/// Write the state when it was touched since the write at `saved`; the touch count written.
async fn save_if_changed(store: &Store, path: &Path, saved: u64) -> u64 {
    let (touches, body) = store.read_for_save(serde_json::to_vec);
    if touches == saved {
        return saved;
    }
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "the stand-in's state could not be serialized");
            return saved;
        }
    };
    let target = path.to_path_buf();
    match tokio::task::spawn_blocking(move || write_atomically(&target, &body)).await {
        Ok(Ok(())) => touches,
        // Tried again at the next pass.
        Ok(Err(e)) => {
            tracing::warn!(path = %path.display(), error = %e, "the stand-in's state could not be written");
            saved
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the stand-in's state could not be written");
            saved
        }
    }
}
