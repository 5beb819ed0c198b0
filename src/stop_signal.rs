//! Ctrl-C and SIGTERM, listened for from the first moment of a command's async part, so that a
//! stop signal at any moment (the private cluster starting, migrations, the demo loading, the
//! stand-ins starting, serving) ends the phase under way and lets the command stop what it
//! started: without a handler, a signal in the first seconds killed the process where it stood
//! and left the cluster it had started running.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// The first stop signal, once it came. Cheap to clone; every clone sees the same signal.
#[derive(Clone)]
pub struct StopSignal {
    came: watch::Receiver<Option<&'static str>>,
    /// `never`'s sender, kept so that `wait` waits for good.
    _never: Option<std::sync::Arc<watch::Sender<Option<&'static str>>>>,
}

impl StopSignal {
    /// Install the handlers now (on the current tokio runtime). From here on a signal no longer
    /// ends the process: the first is said and marked; a second, for someone who will not wait
    /// for the shutdown, ends the process at once.
    pub fn install() -> std::io::Result<StopSignal> {
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let (tx, came) = watch::channel(None);
        tokio::spawn(async move {
            let which = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = interrupt.recv() => "Ctrl-C",
            };
            eprintln!("shutting down ({which}): stopping what this process started");
            let _ = tx.send(Some(which));
            tokio::select! {
                _ = term.recv() => {},
                _ = interrupt.recv() => {},
            }
            eprintln!(
                "a second stop signal: ending at once (a private cluster this process started may still run; \
                 `member-console pg stop` stops it)"
            );
            std::process::exit(130);
        });
        Ok(StopSignal { came, _never: None })
    }

    /// No handlers: a signal does what it does by default (ends the process), and this never
    /// reports one.
    pub fn never() -> StopSignal {
        let (tx, came) = watch::channel(None);
        StopSignal { came, _never: Some(std::sync::Arc::new(tx)) }
    }

    /// Whether a stop signal has come.
    pub fn came(&self) -> bool {
        self.came.borrow().is_some()
    }

    /// Until a stop signal comes.
    pub async fn wait(&self) {
        let mut came = self.came.clone();
        // The sender lives as long as the process (its task ends only by exiting).
        let _ = came.wait_for(Option::is_some).await;
    }

    /// `work` to its end, or None if a stop signal comes first (then `work` is dropped where it
    /// stands: what it had started is ended by its own Drop, or by the caller's teardown).
    pub async fn unless_stopped<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            () = self.wait() => None,
            value = work => Some(value),
        }
    }
}
