//! Progress on stderr for work that may take a while (the float64 reference, generation): a bar
//! that appears once the work has run for a second, only when stderr is a terminal and the
//! output is not JSON.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long work runs before its bar appears.
const DELAY: Duration = Duration::from_secs(1);

/// Whether progress may be drawn: stderr is a terminal and the output is not JSON.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A progress bar (or a spinner, without a total) drawn after [`DELAY`], cleared when finished.
pub struct Progress {
    bar: Option<ProgressBar>,
    done: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts tracking `what`; nothing is drawn unless `enabled` and the work outlasts [`DELAY`].
    pub fn start(enabled: bool, what: &str, total: Option<u64>) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        if !enabled {
            return Progress {
                bar: None,
                done,
                watcher: None,
            };
        }
        let bar = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::hidden())
                .with_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:24}] {pos}/{len} (sequence, value head) pairs, {elapsed}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                ),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()).with_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_message(what.to_string());
        let (b, d) = (bar.clone(), done.clone());
        let watcher = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < DELAY {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::park_timeout(DELAY.saturating_sub(start.elapsed()));
            }
            if !d.load(Ordering::Relaxed) {
                b.set_draw_target(ProgressDrawTarget::stderr());
                b.enable_steady_tick(Duration::from_millis(200));
            }
        });
        Progress {
            bar: Some(bar),
            done,
            watcher: Some(watcher),
        }
    }

    /// Records `n` pieces done.
    pub fn set(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.set_position(n);
        }
    }

    /// Clears the bar (if it was drawn).
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            w.thread().unpark();
            let _ = w.join();
        }
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}
